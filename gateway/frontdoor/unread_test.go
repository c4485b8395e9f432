package frontdoor_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorUnreadJoinsNeverRun: joins whose callers never open their
// stream, at the default read_grace, behind a call that holds the
// replica's only running place (Gradio's default concurrency of one) and
// with two slots: the one that got the second slot queued at the replica,
// the others wait in the gateway's queue. After the grace none of them
// holds a slot or a place, the replica's queue is empty, and none ever
// runs (Gradio 4.x-5.x's cancel leaves a queued call in the queue: the
// gateway drops the session's stream at the replica, which removes it).
// A call of the pool (the gateway's /v1) then gets the free slot at once.
func TestFrontDoorUnreadJoinsNeverRun(t *testing.T) {
	// Gradio 5 drops a session's queued calls when its stream drops; Gradio
	// 6 keeps them and takes one out of the queue at its cancel. Bridged:
	// Gradio 4.20.1 (sse_v2) takes nothing back, and 4.16.0 (sse_v1) only
	// through a session stream that was open.
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio6, gradiotest.Gradio4SSEv2, gradiotest.Gradio4SSEv1} {
		t.Run(string(mode), func(t *testing.T) { testUnreadJoinsNeverRun(t, mode) })
	}
}

func testUnreadJoinsNeverRun(t *testing.T, mode gradiotest.Mode) {
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	sim := gradiotest.NewUnstartedServer(fdtest.SpreadApp(gate))
	sim.Mode = mode
	sim.IgnoresDroppedStreams = mode == gradiotest.Gradio4SSEv2 // as the real 4.20.1
	sim.Start()
	t.Cleanup(sim.Close)
	srv, fd, p := newDoorOver(t, []string{sim.URL}, func(c *config) {
		c.Pool.MaxConnections = 2
		c.Pool.QueueTimeout = time.Minute
	})
	hold := strconv.Itoa(fdtest.FnIndex(t, srv.URL, "hold"))
	occ := fdtest.JoinAt(t, srv.URL, "occupier", `"data":["o"],"fn_index":`+hold)
	occStream := fdtest.Messages(t, srv.URL, "occupier")
	fdtest.WaitMsg(t, occStream, "process_starts")
	for i := range 6 {
		fdtest.JoinAt(t, srv.URL, "unread"+strconv.Itoa(i), `"data":["u"],"fn_index":`+hold)
	}
	// A relayed join is forwarded at once: the one that got the second slot
	// queues at the replica. A bridged call is joined at the replica only
	// once its caller reads (none of these ever does).
	for start := time.Now(); !bridged(mode) && sim.Snapshot().Queued != 1; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 3*time.Second {
			t.Fatalf("the replica queues %d calls, want 1 (the unread join holding the second slot)", sim.Snapshot().Queued)
		}
	}
	deadline := time.Now().Add(fdtest.ReadGrace + 10*time.Second)
	for {
		st := fd.Stats()
		if q := sim.Snapshot().Queued; q == 0 && st.InFlight == 1 && st.NotRead >= 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the grace: replica queue %d, front door %+v; want an empty queue, 1 call in flight, at least 6 not read", sim.Snapshot().Queued, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The freed slot is free: a call elsewhere (the pool's own, as the
	// gateway's /v1 makes) gets it at once.
	if res, err := p.Predict(context.Background(), "", "upper", "v"); err != nil || len(res.Data) == 0 || string(res.Data[0]) != `"V"` {
		t.Fatalf("a pool call after the grace: %v %v", res, err)
	}
	open()
	if done := fdtest.WaitMsg(t, occStream, "process_completed"); done["event_id"] != occ {
		t.Fatalf("occupier: %v", done)
	}
	time.Sleep(500 * time.Millisecond) // a queued call left at the replica would start now
	if n := sim.Executions("hold"); n != 1 {
		t.Fatalf("hold ran %d times, want 1 (the occupier): an unread call ran", n)
	}
}

// bridged reports whether the front door bridges calls to a replica in mode.
func bridged(mode gradiotest.Mode) bool {
	switch mode {
	case gradiotest.Gradio5, gradiotest.Gradio6, gradiotest.Gradio4SSEv3:
		return false
	}
	return true
}
