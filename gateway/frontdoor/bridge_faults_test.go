package frontdoor_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// bridgedModes are the generations the front door bridges (Gradio 3's ws
// included: the simulator's gradio3-ws mode is not in gradiotest.Modes).
var bridgedModes = []gradiotest.Mode{gradiotest.Gradio3WS, gradiotest.Gradio4SSE, gradiotest.Gradio4SSEv1, gradiotest.Gradio4SSEv2, gradiotest.Gradio4SSEv21}

// TestFrontDoorBridgeBadJoins: joins a bridged app cannot run get
// Gradio's error shape at once (no call, no slot kept), and the session
// serves a good call afterwards.
func TestFrontDoorBridgeBadJoins(t *testing.T) {
	for _, mode := range bridgedModes {
		t.Run(string(mode), func(t *testing.T) {
			srv, fd, sims := newDoorMode(t, mode, make([]*gradiotest.App, 1), nil)
			upper := fdtest.FnIndex(t, srv.URL, "upper")
			join := srv.URL + "/gradio_api/queue/join"
			for _, c := range []struct {
				name   string
				body   map[string]any
				status int
				want   string
			}{
				{"fn_index not a number", map[string]any{"data": []any{"x"}, "fn_index": "upper", "session_hash": "bad1"}, 422, "fn_index must be an integer"},
				{"unknown fn_index", map[string]any{"data": []any{"x"}, "fn_index": 999, "session_hash": "bad1"}, 400, "no function with this fn_index"},
				{"too many values", map[string]any{"data": []any{"x", "y"}, "fn_index": upper, "session_hash": "bad1"}, 422, "data has 2 values"},
				{"data not a list", map[string]any{"data": map[string]any{"a": 1}, "fn_index": upper, "session_hash": "bad1"}, 422, "data must be a JSON list"},
				{"a file the gateway never handed out", map[string]any{"data": []any{map[string]any{"path": "/gradiopool/0/forged/etc/passwd", "meta": map[string]any{"_type": "gradio.FileData"}}}, "fn_index": upper, "session_hash": "bad1"}, 400, "file not allowed"},
				{"an unknown upload", map[string]any{"data": []any{map[string]any{"path": "/gradiopool-upload/nope/x.txt"}}, "fn_index": upper, "session_hash": "bad1"}, 400, "unknown or expired"},
			} {
				status, body := fdtest.PostJSON(t, join, c.body)
				if status != c.status || !strings.Contains(body, c.want) || !strings.Contains(body, `"detail"`) {
					t.Errorf("%s: %d %s, want %d with %q in Gradio's detail shape", c.name, status, body, c.status, c.want)
				}
			}
			if got := fdtest.Call(t, srv.URL, "bad1", upper, "still fine"); got != "STILL FINE" {
				t.Errorf("call after the bad joins: %q", got)
			}
			if n := sims[0].Executions("upper"); n != 1 {
				t.Errorf("the replica ran upper %d times, want once (the bad joins never reach it)", n)
			}
			// The slot is freed when the Go job has ended, just after the
			// caller read its completion.
			fdtest.WaitFor(t, "no slot held", func() bool { return fd.Stats().InFlight == 0 })
			if st := fd.Stats(); st.CallerFaults < 5 {
				t.Errorf("stats %+v: want the caller faults counted", st)
			}
		})
	}
}

// readUntil reads a bridged queue/data stream until a message with msg
// (and event id, when given) and returns it.
func readUntil(t *testing.T, sc *bufio.Scanner, msg string) map[string]any {
	t.Helper()
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("stream message is not JSON: %s", d)
		}
		if m["msg"] == msg {
			return m
		}
	}
	t.Fatalf("stream ended before %s: %v", msg, sc.Err())
	return nil
}

// TestFrontDoorBridgeCallerGoneCancels: a bridged call whose caller's
// queue/data stream goes away is stopped at the replica (as Gradio drops
// a session's calls when its stream closes), and its slot is freed.
func TestFrontDoorBridgeCallerGoneCancels(t *testing.T) {
	for _, mode := range bridgedModes {
		t.Run(string(mode), func(t *testing.T) {
			gate := make(chan struct{}) // never opened: the call runs until cancelled
			srv, fd, sims := newDoorMode(t, mode, []*gradiotest.App{fdtest.HoldApp(gate)}, nil)
			fn := fdtest.FnIndex(t, srv.URL, "hold")
			if _, err := fdtest.Join(srv.URL, "gone", fn, "x"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.Get(srv.URL + "/gradio_api/queue/data?session_hash=gone")
			if err != nil {
				t.Fatal(err)
			}
			readUntil(t, bufio.NewScanner(resp.Body), "process_starts")
			// The bridge's first messages can reach the caller before its
			// submit returned and the call was recorded (addPending): the
			// count follows a moment later.
			fdtest.WaitFor(t, "the running call counted in flight", func() bool { return fd.Stats().InFlight == 1 })
			resp.Body.Close() // the caller goes away
			fdtest.WaitFor(t, "the replica's handler stopped and the slot freed", func() bool {
				return sims[0].Snapshot().Running == 0 && fd.Stats().InFlight == 0
			})
		})
	}
}

// TestFrontDoorBridgeReplicaLost: a replica that dies while it runs a
// bridged call: the caller gets Gradio's error completion with the
// gateway's message, then close_stream; the call is not run again
// elsewhere, and the slot is freed.
func TestFrontDoorBridgeReplicaLost(t *testing.T) {
	for _, mode := range bridgedModes {
		t.Run(string(mode), func(t *testing.T) {
			gate := make(chan struct{})
			srv, fd, sims := newDoorMode(t, mode, []*gradiotest.App{fdtest.HoldApp(gate), fdtest.HoldApp(gate)}, func(c *config) {
				c.Pool.MaxConnections = 4
				// hold keeps no state: pinned, its next call moves the
				// session (spread, it would only run elsewhere).
				c.FrontDoor.PinSessions = true
			})
			fn := fdtest.FnIndex(t, srv.URL, "hold")
			id, err := fdtest.Join(srv.URL, "lost", fn, "x")
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.Get(srv.URL + "/gradio_api/queue/data?session_hash=lost")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			readUntil(t, sc, "process_starts")
			var running *gradiotest.Server
			for _, s := range sims {
				if s.Snapshot().Running == 1 {
					running = s
				}
			}
			if running == nil {
				t.Fatal("no replica runs the call")
			}
			running.Close() // the replica dies with the call in flight
			m := readUntil(t, sc, "process_completed")
			out, _ := m["output"].(map[string]any)
			if m["event_id"] != id || m["success"] != false || !strings.Contains(fmt.Sprint(out["error"]), "not run again") {
				t.Errorf("completion after the replica died: %v", m)
			}
			readUntil(t, sc, "close_stream")
			for _, s := range sims {
				if n := s.Executions("hold"); s != running && n != 0 {
					t.Errorf("hold ran %d times on the other replica, want never (a lost call is not run again)", n)
				}
			}
			fdtest.WaitFor(t, "the slot freed", func() bool { return fd.Stats().InFlight == 0 })
			// The session's next call moves to the live replica, on a new
			// session there.
			close(gate)
			if got := fdtest.Call(t, srv.URL, "lost", fn, "y"); got != "released" {
				t.Errorf("the session's call after its replica died: %q", got)
			}
			if st := fd.Stats(); st.Moved != 1 {
				t.Errorf("stats %+v: want the session moved once", st)
			}
		})
	}
}

// TestFrontDoorBridgeReplicaRestart: a bridged session keeps its gr.State
// between calls; when its replica restarts (the app's state is gone), the
// session's next call runs on a new session of the restarted app instead
// of failing.
func TestFrontDoorBridgeReplicaRestart(t *testing.T) {
	for _, mode := range bridgedModes {
		t.Run(string(mode), func(t *testing.T) {
			srv, _, sims := newDoorMode(t, mode, make([]*gradiotest.App, 1), nil)
			counter := fdtest.FnIndex(t, srv.URL, "counter")
			if got := fdtest.Call(t, srv.URL, "rs", counter, "a", nil); got != "1 items: a" {
				t.Fatalf("first call: %q", got)
			}
			if got := fdtest.Call(t, srv.URL, "rs", counter, "b", nil); got != "2 items: a, b" {
				t.Fatalf("second call (gr.State kept): %q", got)
			}
			sims[0].Restart()
			var got string
			for range 50 { // the pool notices the restart on a failed call
				id, err := fdtest.Join(srv.URL, "rs", counter, "c", nil)
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				done, err := fdtest.Stream(srv.URL, "rs")
				if err != nil {
					t.Fatal(err)
				}
				if m := done[id]; m != nil && m["success"] == true {
					out, _ := m["output"].(map[string]any)
					data, _ := out["data"].([]any)
					got = fmt.Sprint(data[0])
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if got != "1 items: c" {
				t.Errorf("call after the replica restarted: %q, want a fresh state (1 items: c)", got)
			}
		})
	}
}

// TestFrontDoorBridgeUnreadCallsCancelled: bridged calls nobody reads
// (no queue/data stream within frontdoor.read_grace) are cancelled and
// free their slots, like relayed ones.
func TestFrontDoorBridgeUnreadCallsCancelled(t *testing.T) {
	gate := make(chan struct{})
	srv, fd, sims := newDoorMode(t, gradiotest.Gradio4SSEv1, []*gradiotest.App{fdtest.HoldApp(gate)}, func(c *config) {
		c.Pool.MaxConnections = 2
		c.FrontDoor.ReadGrace = 100 * time.Millisecond
	})
	fn := fdtest.FnIndex(t, srv.URL, "hold")
	openHeartbeat(t, srv.URL, "unread")
	for i := range 2 {
		if _, err := fdtest.Join(srv.URL, "unread", fn, fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	fdtest.WaitFor(t, "the unread calls cancelled, their slots free", func() bool {
		st := fd.Stats()
		return st.NotRead == 2 && st.InFlight == 0 && sims[0].Snapshot().Running == 0
	})
	// The caller is told when it reads at last: a completion per call.
	done, err := fdtest.Stream(srv.URL, "unread")
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 2 {
		t.Errorf("completions read after the grace: %v, want 2", done)
	}
	close(gate)
}
