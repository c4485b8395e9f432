package frontdoor_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorCallsWaitForSlot: a caller that joins more calls than
// max_connections gets them all run, but never more than max_connections
// at once on the replica: the joins past the limit wait in the gateway for
// a slot (the replica's own concurrency limit is higher, so only the
// gateway can be holding them back).
func TestFrontDoorCallsWaitForSlot(t *testing.T) {
	const maxConn, calls = 2, 5
	gate := make(chan struct{})
	var running, peak atomic.Int32
	app := gradiotest.NewApp()
	ep := app.Handle("hold", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		s, _ := c.String(0)
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []any{"done " + s}, nil
	}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	ep.ConcurrencyLimit = 10 // the replica would run them all at once
	srv, fd, sims, p, _ := newDoorApps(t, []*gradiotest.App{app}, func(c *config) {
		c.Pool.MaxConnections = maxConn
		c.Pool.QueueTimeout = time.Minute
	})
	name := fdtest.ReplicaName(sims[0])
	fn := fdtest.FnIndex(t, srv.URL, "hold")

	type joined struct {
		id  string
		err error
	}
	results := make(chan joined, calls)
	for i := range calls {
		go func() {
			id, err := fdtest.Join(srv.URL, "waiter", fn, fmt.Sprintf("c%d", i))
			results <- joined{id, err}
		}()
	}
	// Witness: the simulator's in-flight counter reaches max_connections and
	// the other joins wait for a slot in the gateway, not on the replica (it
	// never saw their join): one in the pool's queue for the replica, the
	// others behind it on their session (a session's joins take their slots
	// one after the other). Bounded wait.
	var ids []string
	waiting := 0
	for range 2000 {
		waiting = p.Stats(context.Background()).Pools[name].QueueLength
		if sims[0].Snapshot().Running == maxConn && waiting > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if snap := sims[0].Snapshot(); snap.Running != maxConn || snap.Queued != 0 || waiting == 0 {
		t.Fatalf("replica running %d, queued %d; gateway waiters %d: want %d running on the replica and the others waiting in the gateway",
			snap.Running, snap.Queued, waiting, maxConn)
	}
	if n := sims[0].Requests("queue/join"); n != maxConn {
		t.Errorf("the replica received %d joins while %d calls held the slots, want %d", n, maxConn, maxConn)
	}
	// The joins that took the slots are answered, and so are those
	// waiting in the pool's queue (with an event id of the gateway's:
	// their caller is shown its place, see queue_test.go); the
	// replica saw none of the latter (above).
	held := 0
	for range 2000 {
		if held = fd.Stats().InFlight; held == maxConn {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if held != maxConn {
		t.Errorf("front door holds %d slots, want %d", held, maxConn)
	}

	// Open the gate: each completed call frees its slot as its
	// process_completed passes through the gateway, and a waiting join
	// takes it. The caller reads its stream as the JS client does: again
	// whenever it closes while calls are pending.
	close(gate)
	var mu sync.Mutex
	completed := map[string]map[string]any{}
	streamDone := make(chan error, 1)
	go func() {
		for range 200 {
			done, err := fdtest.Stream(srv.URL, "waiter")
			if err != nil {
				streamDone <- err
				return
			}
			mu.Lock()
			for id, m := range done {
				completed[id] = m
			}
			n := len(completed)
			mu.Unlock()
			if n == calls {
				streamDone <- nil
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		streamDone <- fmt.Errorf("the calls did not all complete")
	}()
	for range calls {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		ids = append(ids, r.id)
	}
	if err := <-streamDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if m := completed[id]; m == nil || m["success"] != true {
			t.Errorf("call %s: %v", id, m)
		}
	}
	if got := peak.Load(); got != maxConn {
		t.Errorf("at most %d calls ran at once on the replica, want exactly max_connections %d", got, maxConn)
	}
	if n := sims[0].Executions("hold"); n != calls {
		t.Errorf("hold ran %d times, want %d", n, calls)
	}
	if st := fd.Stats(); st.InFlight != 0 {
		t.Errorf("front door still holds %d slots after every call completed", st.InFlight)
	}
}
