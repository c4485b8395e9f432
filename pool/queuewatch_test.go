package pool_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// posWatch records a QueueWatcher's view.
type posWatch struct {
	mu   sync.Mutex
	pos  func() pool.QueuePosition
	left int
}

func (w *posWatch) Queued(pos func() pool.QueuePosition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pos = pos
}

func (w *posWatch) Left() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pos, w.left = nil, w.left+1
}

func (w *posWatch) at() (pool.QueuePosition, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pos == nil {
		return pool.QueuePosition{}, false
	}
	return w.pos(), true
}

// TestReserveQueueWatcher: a Reserve waiting for a slot reports its
// replica, rank and queue size; no ETA until a slot call was measured,
// then rank+1 slot times over MaxConnections.
func TestReserveQueueWatcher(t *testing.T) {
	cfg := pool.Config{MaxConnections: 2, MinConnections: 2}
	bubbleWith(t, 1, cfg, nil, func(t *testing.T, p *pool.Pool, _ []*gradiotest.Server, _ *http.Client) {
		ctx := context.Background()
		var held []*pool.Slot
		for range 2 {
			sl, err := p.Reserve(ctx, "", pool.ReserveOptions{})
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, sl)
		}
		ws := []*posWatch{{}, {}}
		got := make(chan *pool.Slot, 2)
		for _, w := range ws {
			go func() {
				sl, err := p.Reserve(pool.WithQueueWatcher(ctx, w), "", pool.ReserveOptions{})
				if err == nil {
					got <- sl
				}
			}()
			synctest.Wait()
		}
		pos, ok := ws[1].at()
		if !ok || pos.Replica != p.Replicas()[0] || pos.Rank != 1 || pos.Size != 2 || pos.ETAKnown {
			t.Fatalf("second waiter: %+v (queued %v), want rank 1 of 2 on %s, no ETA", pos, ok, p.Replicas()[0])
		}
		// One slot call held for 4 s: the slot time is 4 s, and over 2
		// slots the waiter at rank 1 is 4 s away.
		time.Sleep(4 * time.Second)
		held[0].Done(gradio.JoinAccepted, nil)
		held[0].Release()
		first := <-got
		synctest.Wait()
		time.Sleep(time.Second) // past the rank's refresh
		pos, ok = ws[1].at()
		if !ok || pos.Rank != 0 || pos.Size != 1 || !pos.ETAKnown || pos.ETA != 2*time.Second {
			t.Errorf("second waiter after one served: %+v, want rank 0 of 1, ETA 2s", pos)
		}
		if ws[0].left != 1 {
			t.Errorf("served waiter left %d times", ws[0].left)
		}
		held[1].Release() // never accepted: not measured
		second := <-got
		synctest.Wait()
		first.Release()
		second.Release()
		if ws[1].left != 1 {
			t.Errorf("second waiter left %d times", ws[1].left)
		}
	})
}
