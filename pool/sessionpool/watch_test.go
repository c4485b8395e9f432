package sessionpool_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/internal/waitq"
)

// watch records a waiter's wait as waitq.Watcher sees it.
type watch struct {
	mu     sync.Mutex
	pos    func() (int, int)
	queued int
	left   int
}

func (w *watch) Queued(pos func() (int, int)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pos = pos
	w.queued++
}

func (w *watch) Left() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pos = nil
	w.left++
}

// at returns the rank and size now; -2 when not queued.
func (w *watch) at() (int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pos == nil {
		return -2, 0
	}
	return w.pos()
}

// TestWatcherSeesRank: a waiter's watcher gets its rank and the queue's
// size, updated as the queue moves, and Left when it is served or gives
// up; a caller served at once is never reported queued.
func TestWatcherSeesRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		p := newPool(t, cfg)
		mustAcquire(t, p).Release() // connected
		first := &watch{}
		s, err := p.Acquire(waitq.WithWatcher(context.Background(), first))
		if err != nil {
			t.Fatal(err)
		}
		if first.queued != 0 {
			t.Error("a caller served at once was reported queued")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ws := make([]*watch, 3)
		type served struct {
			i int
			s interface{ Release() }
		}
		got := make(chan served, 3)
		for i := range ws {
			ws[i] = &watch{}
			go func() {
				s, err := p.Acquire(waitq.WithWatcher(ctx, ws[i]))
				if err == nil {
					got <- served{i, s}
				}
			}()
			synctest.Wait()
		}
		for i, w := range ws {
			if r, n := w.at(); r != i || n != 3 {
				t.Errorf("waiter %d: rank %d of %d, want %d of 3", i, r, n, i)
			}
		}
		// The first waiter is served: the others move up once the ranks
		// are computed again.
		s.Release()
		synctest.Wait()
		g := <-got
		if g.i != 0 {
			t.Errorf("served waiter %d first", g.i)
		}
		if r, n := ws[2].at(); r != 2 || n != 2 {
			t.Errorf("last waiter just after: rank %d of %d, want the old 2 of 2", r, n)
		}
		time.Sleep(time.Second)
		if r, n := ws[2].at(); r != 1 || n != 2 {
			t.Errorf("last waiter after one served: rank %d of %d, want 1 of 2", r, n)
		}
		for range 2 {
			g.s.Release()
			synctest.Wait()
			g = <-got
		}
		g.s.Release()
		for i, w := range ws {
			if w.queued != 1 || w.left != 1 {
				t.Errorf("waiter %d: queued %d, left %d times, want 1 and 1", i, w.queued, w.left)
			}
		}
		closePool(t, p)
	})
}

// TestWatcherLeftOnCancel: a waiter that gives up is reported left.
func TestWatcherLeftOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		p := newPool(t, cfg)
		s := mustAcquire(t, p)
		w := &watch{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Acquire(waitq.WithWatcher(ctx, w))
		}()
		synctest.Wait()
		if r, n := w.at(); r != 0 || n != 1 {
			t.Errorf("rank %d of %d, want 0 of 1", r, n)
		}
		cancel()
		<-done
		if w.left != 1 || w.pos != nil {
			t.Errorf("left %d times after cancel", w.left)
		}
		s.Release()
		closePool(t, p)
	})
}
