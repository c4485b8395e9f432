package pool_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestThreadStarvedReplicaNotDead: a replica with Gradio's default 40
// worker threads takes 50 parallel calls of 3 s: 40 run, the other joins
// wait for a thread (Gradio's login check) and the pings wait too, longer
// than HangTimeout and than the client's header time-out, while its
// streams keep delivering (heartbeats). It is not marked suspect, and no
// call is reported failed: the late joins are awaited within the callers'
// deadline and all 50 calls complete. Before, the replica was marked hung
// and the late joins failed as "may have been accepted" while their calls
// ran.
func TestThreadStarvedReplicaNotDead(t *testing.T) {
	s := gradiotest.NewUnstartedServer(nil)
	s.DefaultConcurrencyLimit = -1
	s.MaxThreads = 40 // Gradio's default max_threads
	s.Latency = 3 * time.Second
	s.HeartbeatInterval = 50 * time.Millisecond
	s.Start()
	t.Cleanup(s.Close)
	rec := &recorder{}
	p := newPool(t, pool.Config{Replicas: []string{s.URL}, MaxConnections: 60, OnEvent: rec.hook,
		HangTimeout: 300 * time.Millisecond, ProbeInterval: 100 * time.Millisecond})
	name := p.Replicas()[0]
	ctx := ctxT(t)
	const calls = 50
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			if _, err := p.Predict(ctx, "", "upper", "x"); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("call failed on a replica short of threads: %v", err)
	}
	if n := rec.count(pool.EventSuspect, name); n > 0 {
		t.Errorf("the busy replica was marked suspect %d times", n)
	}
	if n := s.Executions("upper"); n != calls {
		t.Errorf("%d calls ran, want %d", n, calls)
	}
}
