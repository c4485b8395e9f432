package pool_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

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
		ws := []*pool.QueueWatch{{}, {}}
		got := make(chan *pool.Slot, 2)
		for _, w := range ws {
			go func() {
				sl, err := p.Reserve(ctx, "", pool.ReserveOptions{Watch: w})
				if err == nil {
					got <- sl
				}
			}()
			synctest.Wait()
		}
		pos, ok := ws[1].Position()
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
		pos, ok = ws[1].Position()
		if !ok || pos.Rank != 0 || pos.Size != 1 || !pos.ETAKnown || pos.ETA != 2*time.Second {
			t.Errorf("second waiter after one served: %+v, want rank 0 of 1, ETA 2s", pos)
		}
		if _, ok := ws[0].Position(); ok {
			t.Error("the served waiter still shows a position")
		}
		held[1].Release() // never accepted: not measured
		second := <-got
		synctest.Wait()
		first.Release()
		second.Release()
		if _, ok := ws[1].Position(); ok {
			t.Error("the second waiter still shows a position once served")
		}
		select {
		case <-ws[1].Waited():
		default:
			t.Error("Waited not closed for a call that waited")
		}
	})
}

// TestStickyWaitWatched: with StickySessions, a signed-in user's calls
// waiting for the user's own session (its previous call still holds it)
// are shown their place among the user's waiting calls, and an ETA of one
// slot time per call up to their turn once a call was measured; the
// place is gone once served.
func TestStickyWaitWatched(t *testing.T) {
	cfg := pool.Config{MaxConnections: 4, MinConnections: 1, StickySessions: true}
	bubbleWith(t, 1, cfg, nil, func(t *testing.T, p *pool.Pool, _ []*gradiotest.Server, _ *http.Client) {
		ctx := context.Background()
		const user = "ann@example.org"
		// A measured slot call of 2 s: ETAs are known from then on.
		sl, err := p.Reserve(ctx, "", pool.ReserveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		sl.Done(gradio.JoinAccepted, nil)
		sl.Release()
		holder, err := p.Acquire(ctx, user) // holds the user's own session
		if err != nil {
			t.Fatal(err)
		}
		ws := []*pool.QueueWatch{{}, {}}
		errs := make(chan error, 2)
		for _, w := range ws {
			go func() {
				c, err := p.SubmitWith(ctx, user, pool.CallOptions{Watch: w}, "upper", "x")
				if err == nil {
					_, err = c.Wait(ctx)
				}
				errs <- err
			}()
			synctest.Wait()
		}
		for i, w := range ws {
			pos, ok := w.Position()
			if !ok || pos.Rank != i || pos.Size != 2 || !pos.ETAKnown || pos.ETA != time.Duration(i+1)*2*time.Second {
				t.Errorf("call %d waiting for the user's session: %+v (shown %v), want rank %d of 2, ETA %ds", i, pos, ok, i, 2*(i+1))
			}
		}
		// The sessions pool has free slots: the user's own session is
		// what they wait for.
		holder.Release()
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		for i, w := range ws {
			if _, ok := w.Position(); ok {
				t.Errorf("call %d still shows a place once served", i)
			}
			select {
			case <-w.Waited():
			default:
				t.Errorf("call %d: Waited not closed", i)
			}
		}
	})
}
