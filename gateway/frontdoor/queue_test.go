package frontdoor_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// nextMsg returns the next message of ch with msg kind for event id,
// skipping others; it fails the test when the stream ends or a bounded
// number of messages passed without it.
func nextMsg(t *testing.T, ch <-chan map[string]any, kind, id string) map[string]any {
	t.Helper()
	for range 200 {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended before %s of %s", kind, id)
			}
			if m["msg"] == kind && (id == "" || m["event_id"] == id) {
				return m
			}
		case <-time.After(time.Minute):
			t.Fatalf("no %s of %s within a minute", kind, id)
		}
	}
	t.Fatalf("no %s of %s in 200 messages", kind, id)
	return nil
}

// TestFrontDoorShowsItsQueue: joins that find every slot taken are
// answered at once with an event id of the gateway's; their callers'
// streams carry Gradio estimation messages with their rank in the
// gateway's queue and its size, updated as it moves (an ETA once a call
// was measured); once a slot frees, the call runs and its messages reach
// the caller under the gateway's event id.
func TestFrontDoorShowsItsQueue(t *testing.T) {
	gate := make(chan struct{})
	app := fdtest.SpreadApp(gate)
	srv, fd, _, _, _ := newDoorApps(t, []*gradiotest.App{app}, func(c *config) {
		c.Pool.MaxConnections = 1
	})
	base := srv.URL
	hold := fdtest.FnIndex(t, base, "hold")
	upper := fdtest.FnIndex(t, base, "upper")
	// A first call, measured: the ETA is known from then on.
	if got := fdtest.Call(t, base, "warm", upper, "x"); got != "X" {
		t.Fatalf("upper: %q", got)
	}
	occ, err := fdtest.Join(base, "occupier", hold, "o")
	if err != nil {
		t.Fatal(err)
	}
	occStream := fdtest.Messages(t, base, "occupier")
	nextMsg(t, occStream, "process_starts", occ)

	ids := make([]string, 2)
	streams := make([]<-chan map[string]any, 2)
	for i := range ids {
		sess := fmt.Sprintf("waiter%d", i)
		if ids[i], err = fdtest.Join(base, sess, hold, sess); err != nil {
			t.Fatal(err)
		}
		streams[i] = fdtest.Messages(t, base, sess)
		est := nextMsg(t, streams[i], "estimation", ids[i])
		if est["rank"] != float64(i) || est["queue_size"] != float64(i+1) {
			t.Errorf("waiter %d: first estimation %v, want rank %d of %d", i, est, i, i+1)
		}
		if eta, ok := est["rank_eta"].(float64); !ok || eta <= 0 {
			t.Errorf("waiter %d: rank_eta %v, want seconds from the measured call", i, est["rank_eta"])
		}
	}
	// The first waiter sees the queue grow behind it.
	if est := nextMsg(t, streams[0], "estimation", ids[0]); est["rank"] != float64(0) || est["queue_size"] != float64(2) {
		t.Errorf("waiter 0 after waiter 1 joined: %v, want rank 0 of 2", est)
	}
	// Waiter 0 cancels: waiter 1 moves up while the slot is still taken.
	resp, err := http.Post(base+"/gradio_api/cancel", "application/json",
		strings.NewReader(fmt.Sprintf(`{"session_hash":"waiter0","event_id":%q,"fn_index":%d}`, ids[0], hold)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if done := nextMsg(t, streams[0], "process_completed", ids[0]); done["success"] != false {
		t.Errorf("cancelled waiter ended %v", done)
	}
	moved := false
	for range 10 {
		est := nextMsg(t, streams[1], "estimation", ids[1])
		if moved = est["rank"] == float64(0) && est["queue_size"] == float64(1); moved {
			break
		}
	}
	if !moved {
		t.Error("waiter 1 was never shown rank 0 of 1 after waiter 0 left")
	}
	close(gate) // every hold returns: the occupier's slot frees, then waiter 1's
	nextMsg(t, occStream, "process_completed", occ)
	nextMsg(t, streams[1], "process_starts", ids[1])
	done := nextMsg(t, streams[1], "process_completed", ids[1])
	if done["success"] != true || !strings.Contains(fmt.Sprint(done["output"]), "held waiter1") {
		t.Errorf("waiter 1 ended %v", done)
	}
	nextMsg(t, streams[1], "close_stream", "")
	if st := fd.Stats(); st.Queued != 2 || st.InFlight != 0 {
		t.Errorf("front door stats: %d joins queued, %d in flight; want 2 and 0", st.Queued, st.InFlight)
	}
}

// TestFrontDoorQueueTimeoutOnStream: a call that waited in the gateway's
// queue until queue_timeout ends on its caller's stream as Gradio's
// process_completed with success false and the gateway's own message.
func TestFrontDoorQueueTimeoutOnStream(t *testing.T) {
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	app := fdtest.SpreadApp(gate)
	srv, _, _, _, _ := newDoorApps(t, []*gradiotest.App{app}, func(c *config) {
		c.Pool.MaxConnections = 1
		c.Pool.QueueTimeout = 300 * time.Millisecond
	})
	base := srv.URL
	hold := fdtest.FnIndex(t, base, "hold")
	if _, err := fdtest.Join(base, "occupier", hold, "o"); err != nil {
		t.Fatal(err)
	}
	id, err := fdtest.Join(base, "late", hold, "l")
	if err != nil {
		t.Fatal(err)
	}
	ch := fdtest.Messages(t, base, "late")
	if est := nextMsg(t, ch, "estimation", id); est["rank"] != float64(0) || est["rank_eta"] != nil {
		t.Errorf("estimation %v, want rank 0 and no ETA (nothing measured yet)", est)
	}
	done := nextMsg(t, ch, "process_completed", id)
	out, _ := done["output"].(map[string]any)
	msg, _ := out["error"].(string)
	if done["success"] != false || !strings.Contains(msg, "gradiopool: all 1 replicas are busy; waited") {
		t.Errorf("process_completed %v, want success false and the gateway's busy message", done)
	}
	nextMsg(t, ch, "close_stream", "")
}

// TestFrontDoorQueueJSClient: the official JS client's status events
// show the gateway's queue while its call waits for a slot (stage
// pending, queue, its position, the queue's size and an ETA), and the
// gateway's own message when the wait ends in queue_timeout.
func TestFrontDoorQueueJSClient(t *testing.T) {
	fdtest.NodeOrSkip(t) // before any replica starts
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	app := fdtest.SpreadApp(gate)
	srv, _, _, _, _ := newDoorApps(t, []*gradiotest.App{app}, func(c *config) {
		c.Pool.MaxConnections = 1
		c.Pool.QueueTimeout = 2 * time.Second
	})
	base := srv.URL
	hold := fdtest.FnIndex(t, base, "hold")
	// A measured call: ETAs are known from then on.
	if got := fdtest.Call(t, base, "warm", fdtest.FnIndex(t, base, "measured"), "x"); got != "X" {
		t.Fatalf("upper: %q", got)
	}
	if _, err := fdtest.Join(base, "occupier", hold, "o"); err != nil {
		t.Fatal(err)
	}
	out := fdtest.NodeOutput(t, time.Minute, "queue_status.mjs", base+"/", "/hold", "js")
	fdtest.CheckJSQueueStatus(t, out)
}

// TestFrontDoorQueuedCallerGoes: a caller whose stream closes while its
// call waits in the gateway's queue leaves the queue (as Gradio drops a
// session's calls when its stream closes): the replica never gets the
// call, and the front door holds nothing for it.
func TestFrontDoorQueuedCallerGoes(t *testing.T) {
	gate := make(chan struct{})
	app := fdtest.SpreadApp(gate)
	srv, fd, sims, p, _ := newDoorApps(t, []*gradiotest.App{app}, func(c *config) {
		c.Pool.MaxConnections = 1
	})
	base := srv.URL
	hold := fdtest.FnIndex(t, base, "hold")
	occ, err := fdtest.Join(base, "occupier", hold, "o")
	if err != nil {
		t.Fatal(err)
	}
	occStream := fdtest.Messages(t, base, "occupier")
	id, err := fdtest.Join(base, "leaver", hold, "gone")
	if err != nil {
		t.Fatal(err)
	}
	leaveAfterEstimation(t, base, "leaver", id)
	name := fdtest.ReplicaName(sims[0])
	left := false
	for range 2000 {
		if left = p.Stats(context.Background()).Pools[name].QueueLength == 0 && fd.CallsInFlight() == 1; left {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !left {
		t.Fatalf("the gone caller's call still waits: queue %d, calls in flight %d",
			p.Stats(context.Background()).Pools[name].QueueLength, fd.CallsInFlight())
	}
	close(gate)
	nextMsg(t, occStream, "process_completed", occ)
	if n := sims[0].Executions("hold"); n != 1 {
		t.Errorf("hold ran %d times, want only the occupier's", n)
	}
}

// TestFrontDoorQueuedStoppedByDrainTimeout: a call still waiting in the
// gateway's queue when the drain's time-out stops the calls (StopCalls)
// ends on its caller's stream with the gateway's stopped message, and is
// never sent to the replica.
func TestFrontDoorQueuedStoppedByDrainTimeout(t *testing.T) {
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	app := fdtest.SpreadApp(gate)
	srv, fd, sims, _, _ := newDoorApps(t, []*gradiotest.App{app}, func(c *config) {
		c.Pool.MaxConnections = 1
	})
	base := srv.URL
	hold := fdtest.FnIndex(t, base, "hold")
	if _, err := fdtest.Join(base, "occupier", hold, "o"); err != nil {
		t.Fatal(err)
	}
	id, err := fdtest.Join(base, "stopped", hold, "s")
	if err != nil {
		t.Fatal(err)
	}
	ch := fdtest.Messages(t, base, "stopped")
	nextMsg(t, ch, "estimation", id)
	if n := fd.CallsInFlight(); n != 2 {
		t.Errorf("calls in flight %d, want 2 (the waiting call counts: a drain waits for it)", n)
	}
	fd.StopCalls()
	done := nextMsg(t, ch, "process_completed", id)
	out, _ := done["output"].(map[string]any)
	if msg, _ := out["error"].(string); done["success"] != false || !strings.Contains(msg, "drain_timeout") {
		t.Errorf("process_completed %v, want the gateway's stopped message", done)
	}
	nextMsg(t, ch, "close_stream", "")
	if n := sims[0].Requests("queue/join"); n != 1 {
		t.Errorf("the replica got %d joins, want only the occupier's", n)
	}
}
