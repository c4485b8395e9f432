package frontdoor_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorSpreadsStatelessCalls: the calls of ONE caller session to
// an endpoint without gr.State run on all three replicas at once (each
// runs one call at a time), while its gr.State calls stay on the
// session's replica with their state; every message reaches the caller on
// its one stream, in order per call with the replicas' event ids; one
// upload reaches every replica that runs a call using it; cancel reaches
// the replica running the call; a replica killed with a call of the
// session in flight fails that call only.
func TestFrontDoorSpreadsStatelessCalls(t *testing.T) {
	gate := make(chan struct{})
	app := fdtest.SpreadApp(gate)
	srv, fd, sims, _, _ := newDoorApps(t, []*gradiotest.App{app, app, app}, nil)
	base := srv.URL
	hold, counter := fdtest.FnIndex(t, base, "hold"), fdtest.FnIndex(t, base, "counter")
	const sess = "spread1"

	// The first (stateful) call binds the session.
	if got := fdtest.Call(t, base, sess, counter, "a", nil); got != "1 items: a" {
		t.Fatalf("counter: %q", got)
	}
	home := -1
	for i, s := range sims {
		if s.Executions("counter") == 1 {
			home = i
		}
	}
	if home < 0 {
		t.Fatal("no replica ran the first counter call")
	}

	msgs := fdtest.Messages(t, base, sess)
	ids := map[string]int{} // event id -> i
	byID := map[string][]string{}
	completed := map[string]map[string]any{}
	closeSeen := false
	collect := func(until func() bool) {
		t.Helper()
		for !until() {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("stream ended; completed %d of %d", len(completed), len(ids))
				}
				msg, _ := m["msg"].(string)
				if msg == "close_stream" {
					closeSeen = true
					continue
				}
				id, _ := m["event_id"].(string)
				if id == "" {
					continue
				}
				if _, ok := ids[id]; !ok {
					t.Errorf("message %v with an event id the caller was never given", m)
				}
				if completed[id] != nil {
					t.Errorf("message %s after the process_completed of %s", msg, id)
				}
				byID[id] = append(byID[id], msg)
				if msg == "process_completed" {
					completed[id] = m
				}
			case <-time.After(time.Minute): // hang guard
				t.Fatalf("no message for a minute; completed %d of %d", len(completed), len(ids))
			}
		}
	}
	for i := range 3 {
		id, err := fdtest.Join(base, sess, hold, fmt.Sprintf("h%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = i
	}
	// Each replica runs one hold call: they were spread (pinned, two would
	// wait in the session's replica's queue).
	fdtest.WaitFor(t, "one hold call running on each replica", func() bool {
		for _, s := range sims {
			if s.Snapshot().Running != 1 {
				return false
			}
		}
		return true
	})
	// The session's uploads reach whichever replica runs the call that
	// uses them: three reverse_file calls of one upload, spread while
	// every replica runs a hold call.
	up := fdUpload(t, base, "in.txt", "abcdef")
	for i := range 3 {
		id, err := fdtest.Join(base, sess, fdtest.FnIndex(t, base, "reverse_file"), map[string]any{"path": up, "meta": map[string]any{"_type": "gradio.FileData"}})
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = 300 + i
	}
	collect(func() bool {
		n := 0
		for id := range completed {
			if ids[id] >= 300 {
				n++
			}
		}
		return n == 3
	})
	revOn := 0
	for _, s := range sims {
		if s.Executions("reverse_file") > 0 {
			revOn++
		}
	}
	if revOn < 2 {
		t.Errorf("the session's reverse_file calls ran on %d replica(s), want them spread", revOn)
	}

	// A gr.State call of the same session runs on its replica, with its
	// state, while the spread calls run.
	cid, err := fdtest.Join(base, sess, counter, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	ids[cid] = 100

	// Cancel one spread call: the replica running it gets the cancel
	// (each runs one call of the session's backend session there).
	var xid string
	for id, i := range ids {
		if i < 100 {
			xid = id
			break
		}
	}
	body, _ := json.Marshal(map[string]any{"session_hash": sess, "event_id": xid, "fn_index": hold})
	resp, err := http.Post(base+"/gradio_api/cancel", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancelledOn, cancels := -1, 0
	for i, s := range sims {
		if n := s.Requests("cancel"); n > 0 {
			cancelledOn, cancels = i, cancels+n
		}
	}
	if resp.StatusCode != http.StatusOK || cancels != 1 {
		t.Fatalf("cancel: %d, replicas saw %d cancels", resp.StatusCode, cancels)
	}
	fdtest.WaitFor(t, "the cancelled call stopped on its replica", func() bool { return sims[cancelledOn].Snapshot().Running == 0 })

	// Kill a replica that runs a spread call (not the session's, not the
	// cancelled call's): its call fails, the others go on.
	victim := 0
	for victim == home || victim == cancelledOn {
		victim++
	}
	sims[victim].CloseClientConnections()
	sims[victim].Close()

	// The killed replica's call and the cancelled one end first.
	collect(func() bool { return len(completed) >= 5 })
	close(gate)
	collect(func() bool { return len(completed) == len(ids) && closeSeen })

	lost, held, cancelled := 0, 0, 0
	for id, i := range ids {
		m := completed[id]
		switch {
		case i == 100:
			out, _ := m["output"].(map[string]any)
			data, _ := out["data"].([]any)
			if m["success"] != true || len(data) == 0 || data[0] != "2 items: a, b" {
				t.Errorf("stateful call: %v, want its state kept on the session's replica", m)
			}
		case i >= 300:
			if m["success"] != true {
				t.Errorf("reverse_file call %d: %v", i-300, m)
			}
		case m["success"] != true:
			lost++
		case strings.Contains(fmt.Sprint(m["output"]), "held h"):
			held++
		default:
			cancelled++
		}
		if seq := byID[id]; len(seq) < 2 || seq[len(seq)-1] != "process_completed" {
			t.Errorf("call %d: messages %v", i, seq)
		}
	}
	if held != 1 || lost != 1 || cancelled != 1 {
		t.Errorf("hold calls: %d succeeded, %d lost, %d cancelled; want one each (one ran on the killed replica, one was cancelled)", held, lost, cancelled)
	}
	for i, s := range sims {
		if i != home && s.Executions("counter") != 0 {
			t.Errorf("replica %d ran a gr.State call of the session bound to replica %d", i, home)
		}
	}
	if st := fd.Stats(); st.InFlight != 0 {
		t.Errorf("after every call ended: %+v", st)
	}
}

// TestFrontDoorPinSessions: with pin_sessions, or for an endpoint in
// pinned_endpoints, a session's calls all run on its replica.
func TestFrontDoorPinSessions(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*config)
	}{
		{"pin_sessions", func(c *config) { c.FrontDoor.PinSessions = true }},
		{"pinned_endpoints", func(c *config) { c.FrontDoor.PinnedEndpoints = []string{"/hold"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := make(chan struct{})
			app := fdtest.SpreadApp(gate)
			srv, _, sims, _, _ := newDoorApps(t, []*gradiotest.App{app, app, app}, tc.mod)
			hold := fdtest.FnIndex(t, srv.URL, "hold")
			const sess = "pinned1"
			msgs := fdtest.Messages(t, srv.URL, sess) // session not bound yet: ends at once
			for range msgs {
			}
			for i := range 3 {
				if _, err := fdtest.Join(srv.URL, sess, hold, fmt.Sprintf("p%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			fdtest.WaitFor(t, "the three calls on one replica (one running, two queued)", func() bool {
				for _, s := range sims {
					if sn := s.Snapshot(); sn.Running == 1 && sn.Queued == 2 {
						return true
					}
				}
				return false
			})
			close(gate)
			done, err := fdtest.Stream(srv.URL, sess)
			if err != nil || len(done) != 3 {
				t.Fatalf("%d calls completed (%v)", len(done), err)
			}
		})
	}
}

// TestFrontDoorSpreadJSClient: one shared official JS client making calls
// six at a time through the front door runs them on all three replicas
// (each runs /upper one call at a time, Gradio's default), every call
// answered.
func TestFrontDoorSpreadJSClient(t *testing.T) {
	fdtest.NodeOrSkip(t) // before any replica starts
	srv, _, sims, _ := newDoor(t, 3, nil)
	out := fdtest.NodeOutput(t, 2*time.Minute, "frontdoor_bench.mjs", srv.URL+"/", "--concurrent", "6", "--warmup", "0", "--calls", "60")
	var r struct {
		Errors     int     `json:"errors"`
		FirstError *string `json:"first_error"`
		Concurrent struct {
			Calls int `json:"calls"`
		} `json:"concurrent"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if r.Errors != 0 || r.Concurrent.Calls != 60 {
		first := ""
		if r.FirstError != nil {
			first = *r.FirstError
		}
		t.Fatalf("%d calls answered, %d errors (first: %s)", r.Concurrent.Calls, r.Errors, first)
	}
	total := 0
	for i, s := range sims {
		n := s.Executions("upper")
		total += n
		if n == 0 {
			t.Errorf("replica %d ran none of the shared client's calls", i)
		}
	}
	if total != 60 {
		t.Errorf("the replicas ran %d calls, want 60 (each once)", total)
	}
}

// fdUpload uploads one file through the front door and returns its path.
func fdUpload(t *testing.T, base, name, content string) string {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("files", name)
	_, _ = fw.Write([]byte(content))
	_ = mw.Close()
	resp, err := http.Post(base+"/gradio_api/upload", mw.FormDataContentType(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var paths []string
	if err := json.NewDecoder(resp.Body).Decode(&paths); err != nil || resp.StatusCode != http.StatusOK || len(paths) != 1 {
		t.Fatalf("upload: %d %v %v", resp.StatusCode, paths, err)
	}
	return paths[0]
}
