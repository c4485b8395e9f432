package pool_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// Regression (issue 16, defect 4): callers that arrived while the
// replica's app connected waited on the connect and only then entered the
// FIFO queue, all at once, so the last to arrive could be served first
// (order 9 4 0 1 2 3 7 5 6 8). They must hold their place while it
// connects.
func TestFIFOWhileTheAppConnects(t *testing.T) {
	s := gradiotest.NewUnstartedServer(nil)
	s.DefaultConcurrencyLimit = -1
	s.ConnectCost = 600 * time.Millisecond // each of /config and /info
	s.Start()
	t.Cleanup(s.Close)
	p := newPool(t, pool.Config{Replicas: []string{s.URL}, MinConnections: 1, MaxConnections: 1, QueueTimeout: 30 * time.Second})
	ctx := ctxT(t)

	const n = 10
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			l, err := p.Acquire(ctx, "")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			l.Release()
		})
		time.Sleep(40 * time.Millisecond) // all arrive while the app connects (600 ms)
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("served in the order %v, want arrival order", order)
		}
	}
}
