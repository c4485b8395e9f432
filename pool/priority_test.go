package pool_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestPriorityFullPool: one replica with one session, busy with a 1 s call.
// High-priority callers that arrive after normal ones are served first;
// a low-priority caller behind a steady stream of high ones is served
// once it has waited PriorityMaxWait (plus the call in progress then).
func TestPriorityFullPool(t *testing.T) {
	cfg := pool.Config{MaxConnections: 1, QueueTimeout: time.Minute, PriorityMaxWait: 5 * time.Second}
	bubbleWith(t, 1, cfg, func(_ int, s *gradiotest.Server) { s.DefaultConcurrencyLimit = -1 },
		func(t *testing.T, p *pool.Pool, _ []*gradiotest.Server, _ *http.Client) {
			start := time.Now()
			type done struct {
				name string
				at   time.Duration
			}
			got := make(chan done, 64)
			call := func(name string, prio pool.Priority) {
				go func() {
					c, err := p.SubmitWith(context.Background(), "", pool.CallOptions{Priority: prio}, "slow", 1)
					if err == nil {
						_, err = c.Wait(context.Background())
						<-c.Done() // as Predict: served once the session is back
					}
					if err != nil {
						t.Errorf("%s: %v", name, err)
					}
					got <- done{name, time.Since(start)}
				}()
				synctest.Wait()
			}
			call("first", pool.PriorityNormal) // holds the only session for 1 s
			call("n1", pool.PriorityNormal)
			call("n2", pool.PriorityNormal)
			call("h1", pool.PriorityHigh)
			call("h2", pool.PriorityHigh)
			if q := p.Stats(context.Background()).TotalQueued; q != 4 {
				t.Fatalf("queued %d, want 4", q)
			}
			var order []string
			for range 5 {
				order = append(order, (<-got).name)
			}
			want := []string{"first", "h1", "h2", "n1", "n2"}
			for i := range want {
				if order[i] != want[i] {
					t.Fatalf("served %v, want %v", order, want)
				}
			}

			// Starvation bound: a low caller, then a new high caller every
			// 0.9 s for 12 s; each call runs 1 s.
			start = time.Now()
			call("first", pool.PriorityHigh)
			call("low", pool.PriorityLow)
			for i := range 13 {
				call("high", pool.PriorityHigh)
				if i < 12 {
					time.Sleep(900 * time.Millisecond)
				}
			}
			var lowAt time.Duration
			for range 15 {
				if d := <-got; d.name == "low" {
					lowAt = d.at
				}
			}
			// Promoted at 5 s of waiting; the session frees at the next
			// whole second; its own call then takes 1 s: done by 7 s.
			if lowAt == 0 || lowAt > 7*time.Second {
				t.Fatalf("low-priority call done after %v, want within 7s (priority_max_wait 5s + one call + its own)", lowAt)
			}
			if lowAt < 5*time.Second {
				t.Fatalf("low-priority call done after %v: before its promotion at 5s, high callers did not go first", lowAt)
			}
		})
}
