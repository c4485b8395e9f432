package sessionpool_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// rampWaits ramps demand from 0 to n sessions held, one new Acquire every
// step, each connect taking connect; it returns how long each Acquire
// waited and the pool's stat at the peak, then releases everything.
func rampWaits(t *testing.T, p *sessionpool.Pool[*fakeConn], n int, step time.Duration) ([]time.Duration, sessionpool.Stat) {
	t.Helper()
	var mu sync.Mutex
	var held []*sessionpool.Session[*fakeConn]
	waits := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			s, err := p.Acquire(context.Background())
			if err != nil {
				t.Errorf("acquire %d: %v", i, err)
				return
			}
			waits[i] = time.Since(start)
			mu.Lock()
			held = append(held, s)
			mu.Unlock()
		})
		time.Sleep(step)
	}
	wg.Wait()
	st := p.Stat()
	for _, s := range held {
		s.Release()
	}
	return waits, st
}

func p95(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*95+99)/100-1]
}

// TestDemandWarmUp ramps from 0 to 40 sessions in use over 2 s with
// connects of 1 s. Without demand tracking nearly every Acquire waits for
// its own connect; with it, sessions opened ahead of the rise serve most
// of them at once. When demand falls the spare sessions age out with the
// idle rule, and the sampler parks.
func TestDemandWarmUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window time.Duration
	}{
		{"without", 0},
		{"with", 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &backend{connectFn: func(ctx context.Context, _ int) error {
					select {
					case <-time.After(time.Second):
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}}
				cfg := b.config()
				cfg.MinSessions, cfg.MaxSessions = 1, 50
				cfg.IdleTimeout = time.Minute
				cfg.HealthCheckInterval = -1
				cfg.DemandWindow = tc.window
				p := newPool(t, cfg)
				p.Warm()
				time.Sleep(2 * time.Second) // the minimum is open

				waits, peak := rampWaits(t, p, 40, 50*time.Millisecond)
				slow := 0
				for _, w := range waits {
					if w >= 900*time.Millisecond {
						slow++
					}
				}
				t.Logf("%s demand tracking: p95 wait %v, %d of 40 waited for a connect, %d sessions at the peak, %d opened ahead",
					tc.name, p95(waits), slow, peak.Total+peak.Connecting, peak.DemandConnects)
				if tc.window == 0 {
					if slow < 35 || peak.DemandConnects != 0 {
						t.Errorf("without demand tracking %d waited a connect, %d opened ahead; want nearly all, 0", slow, peak.DemandConnects)
					}
				} else {
					if slow > 20 || peak.DemandConnects == 0 {
						t.Errorf("with demand tracking %d waited a connect, %d opened ahead; want at most half", slow, peak.DemandConnects)
					}
					if peak.Total+peak.Connecting > 50 {
						t.Errorf("%d sessions: above MaxSessions", peak.Total+peak.Connecting)
					}
				}
				// Demand falls to zero: spares age out to the minimum.
				time.Sleep(3 * time.Minute)
				if st := p.Stat(); st.Total != 1 || st.Connecting != 0 {
					t.Errorf("after the load: %d open, %d connecting; want the minimum of 1", st.Total, st.Connecting)
				}
				closePool(t, p)
				b.verifyAllClosed(t)
			})
		})
	}
}
