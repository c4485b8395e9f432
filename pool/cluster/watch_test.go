package cluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/internal/waitq"
	"github.com/gradiopool/gradiopool/pool"
)

// rankWatch records a waitq.Watcher's view.
type rankWatch struct {
	mu   sync.Mutex
	pos  func() (int, int)
	left int
}

func (w *rankWatch) Queued(pos func() (int, int)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pos = pos
}

func (w *rankWatch) Left() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pos, w.left = nil, w.left+1
}

func (w *rankWatch) at() (int, int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pos == nil {
		return 0, 0, false
	}
	r, n := w.pos()
	return r, n, true
}

// TestWatcherSeesLeaseWait: a caller waiting for a lease reports its rank
// among this gateway's waiters and their number to its watcher, and
// leaves when it gets the lease.
func TestWatcherSeesLeaseWait(t *testing.T) {
	addr := redistest.Start(t)
	c := gateway(t, addr, "g1", 1, 2*time.Second)
	ctx := context.Background()
	held, err := c.Acquire(ctx, replica, pool.PriorityNormal)
	if err != nil {
		t.Fatal(err)
	}
	ws := []*rankWatch{{}, {}}
	got := make(chan pool.Permit, 2)
	for i, w := range ws {
		go func() {
			p, err := c.Acquire(waitq.WithWatcher(ctx, w), replica, pool.PriorityNormal)
			if err == nil {
				got <- p
			}
		}()
		// Bounded wait for it to queue (real Redis: no bubble).
		for range 2000 {
			if _, _, ok := w.at(); ok {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if r, n, ok := w.at(); !ok || r != i || n != i+1 {
			t.Fatalf("waiter %d: rank %d of %d (queued %v), want %d of %d", i, r, n, ok, i, i+1)
		}
	}
	held.Release()
	p := <-got
	if ws[0].left != 1 {
		t.Errorf("served waiter left %d times", ws[0].left)
	}
	p.Release()
	(<-got).Release()
	if ws[1].left != 1 {
		t.Errorf("second waiter left %d times", ws[1].left)
	}
}
