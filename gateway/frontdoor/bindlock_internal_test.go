package frontdoor

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

// TestBindLockShowsPlaces: joins waiting for a session's bind lock are
// shown their place behind the holder's place in the pool's queue and
// the session's joins before them, with an ETA scaled from the holder's;
// the lock goes to them in arrival order.
func TestBindLockShowsPlaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l bindLock
		ctx := context.Background()
		holder := newJoinWatch()
		if err := l.lock(ctx, holder, 0); err != nil {
			t.Fatal(err)
		}
		// The holder waits in the pool at rank 2 of 3, 3 s away.
		holder.queued(func() pool.QueuePosition {
			return pool.QueuePosition{Replica: "r0", Rank: 2, Size: 3, ETA: 3 * time.Second, ETAKnown: true}
		})
		ws := []*joinWatch{newJoinWatch(), newJoinWatch()}
		order := make(chan int, 2)
		for i, w := range ws {
			go func() {
				if err := l.lock(ctx, w, 0); err != nil {
					t.Error(err)
					return
				}
				order <- i
			}()
			synctest.Wait()
		}
		for i, w := range ws {
			pos, ok := w.Position()
			want := pool.QueuePosition{Replica: "r0", Rank: 3 + i, Size: 5, ETA: time.Duration(4+i) * time.Second, ETAKnown: true}
			if !ok || pos != want {
				t.Errorf("waiter %d: %+v (shown %v), want %+v", i, pos, ok, want)
			}
		}
		select {
		case <-ws[1].waited:
		default:
			t.Error("Waited not closed for a join waiting for the lock")
		}
		holder.left()
		l.unlock()
		synctest.Wait()
		if got := <-order; got != 0 {
			t.Fatalf("the lock went to waiter %d first", got)
		}
		if _, ok := ws[0].Position(); ok {
			t.Error("the join holding the lock still shows a place")
		}
		// The new holder shows no place (it has its slot): only the
		// session's joins are ahead of the last one.
		if pos, ok := ws[1].Position(); !ok || pos.Rank != 0 || pos.Size != 1 || pos.ETAKnown {
			t.Errorf("last waiter: %+v (shown %v), want rank 0 of 1, no ETA", pos, ok)
		}
		l.unlock()
		synctest.Wait()
		if got := <-order; got != 1 {
			t.Fatalf("the lock went to waiter %d", got)
		}
		l.unlock()
		if l.held || len(l.waiters) != 0 {
			t.Errorf("lock after the last unlock: held %v, %d waiters", l.held, len(l.waiters))
		}
	})
}

// TestBindLockBounds: a join waiting for the lock gives up at its
// time-out (pool.ErrQueueTimeout, so the caller gets the gateway's busy
// message) or when its context ends, and leaves the line: the lock is
// free once the holder lets it go.
func TestBindLockBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l bindLock
		if err := l.lock(context.Background(), nil, 0); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err := l.lock(context.Background(), newJoinWatch(), 2*time.Second)
		if !errors.Is(err, pool.ErrQueueTimeout) || time.Since(start) != 2*time.Second {
			t.Errorf("wait past its time-out: %v after %v, want a queue time-out after 2s", err, time.Since(start))
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- l.lock(ctx, nil, 0) }()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled wait: %v", err)
		}
		l.unlock()
		if l.held || len(l.waiters) != 0 {
			t.Errorf("after the holder left: held %v, %d waiters; want free", l.held, len(l.waiters))
		}
	})
}
