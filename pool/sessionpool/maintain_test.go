package sessionpool_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// acquireN acquires n sessions and returns them.
func acquireN(t *testing.T, p *sessionpool.Pool[*fakeConn], n int) []*sessionpool.Session[*fakeConn] {
	t.Helper()
	ss := make([]*sessionpool.Session[*fakeConn], n)
	for i := range ss {
		ss[i] = mustAcquire(t, p)
	}
	return ss
}

func releaseAll(ss []*sessionpool.Session[*fakeConn]) {
	for _, s := range ss {
		s.Release()
	}
}

func TestIdleTimeoutKeepsMin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.Check = 2, nil
		p := newPool(t, cfg)
		ss := acquireN(t, p, 6)
		synctest.Wait()
		releaseAll(ss)
		time.Sleep(sessionpool.DefaultIdleTimeout - time.Second)
		if st := p.Stat(); st.Total != 6 || st.DestroyedIdle != 0 {
			t.Errorf("before 10 min: %+v", st)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if st := p.Stat(); st.Total != 2 || st.Idle != 2 || st.DestroyedIdle != 4 {
			t.Errorf("after 10 min: %+v", st)
		}
		time.Sleep(time.Hour)
		if st := p.Stat(); st.Total != 2 {
			t.Errorf("an hour later, below min: %+v", st)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestLIFOLetsSurplusAgeOut: a session used every minute stays, the idle
// surplus goes, because reuse is most recently used first.
func TestLIFOLetsSurplusAgeOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.Check = 1, nil
		p := newPool(t, cfg)
		ss := acquireN(t, p, 3)
		synctest.Wait()
		hot := ss[2].ID()
		releaseAll(ss) // released in order 0, 1, 2: 2 is the most recent
		for range 12 {
			time.Sleep(time.Minute)
			s := mustAcquire(t, p)
			if s.ID() != hot {
				t.Fatalf("acquired session %d, want the most recently used (%d)", s.ID(), hot)
			}
			s.Release()
		}
		synctest.Wait()
		if st := p.Stat(); st.Total != 1 || st.DestroyedIdle != 2 {
			t.Errorf("after 12 min: %+v", st)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

func TestHealthCheckDestroysAfterThreeFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		b.checkFn = func(ctx context.Context, c *fakeConn) error {
			if c.id == 1 {
				return errors.New("ping failed")
			}
			return nil
		}
		cfg := b.config()
		cfg.IdleTimeout = -1
		var mu sync.Mutex
		var checks []sessionpool.Event
		cfg.OnEvent = func(e sessionpool.Event) {
			if e.Kind == sessionpool.EventHealthCheck {
				mu.Lock()
				checks = append(checks, e)
				mu.Unlock()
			}
		}
		p := newPool(t, cfg)
		mustAcquire(t, p).Release()
		synctest.Wait()
		// waitChecks steps the fake clock until n checks have run; rounds
		// come every 5 min ± 10 %.
		waitChecks := func(n int64) {
			t.Helper()
			for i := 0; p.Stat().HealthChecks < n; i++ {
				if i > 1000 {
					t.Fatalf("fewer than %d checks after 16 min: %+v", n, p.Stat())
				}
				time.Sleep(time.Second)
			}
			synctest.Wait()
		}
		waitChecks(5)
		st := p.Stat()
		if st.HealthChecks != 5 || st.Unhealthy != 1 || st.Healthy != 4 || st.LastHealthCheck.IsZero() {
			t.Errorf("after one round: %+v", st)
		}
		waitChecks(15)
		st = p.Stat()
		if st.DestroyedHealth != 1 || st.Total != 5 || st.Unhealthy != 0 || st.HealthCheckFailures != 3 {
			t.Errorf("after three rounds: %+v", st)
		}
		mu.Lock()
		if len(checks) != 15 {
			t.Errorf("%d health-check events, want 15", len(checks))
		}
		mu.Unlock()
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestHealthCheckIsNotUse: checks do not keep surplus sessions alive.
func TestHealthCheckIsNotUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.HealthCheckMax = 1, -1
		p := newPool(t, cfg)
		ss := acquireN(t, p, 4)
		synctest.Wait()
		releaseAll(ss)
		time.Sleep(sessionpool.DefaultIdleTimeout + time.Second)
		synctest.Wait()
		st := p.Stat()
		if st.HealthChecks < 4 || st.Total != 1 || st.DestroyedIdle != 3 {
			t.Errorf("checks %d, stat %+v: want surplus reaped despite checks", st.HealthChecks, st)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestSessionUnderCheckNotHandedOut: with one session under a slow check,
// Acquire waits for the check to finish.
func TestSessionUnderCheckNotHandedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		b.checkFn = func(ctx context.Context, c *fakeConn) error {
			time.Sleep(20 * time.Second)
			return nil
		}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		p := newPool(t, cfg)
		mustAcquire(t, p).Release()
		// Step into the first check (its start is jittered).
		for i := 0; p.Stat().Checking == 0; i++ {
			if i > 400 {
				t.Fatal("no health check within 6 min")
			}
			time.Sleep(time.Second)
		}
		if st := p.Stat(); st.Checking != 1 || st.Idle != 0 || !st.HealthCheckRunning {
			t.Fatalf("during check: %+v", st)
		}
		start := time.Now()
		s := mustAcquire(t, p)
		if waited := time.Since(start); waited == 0 || waited > 20*time.Second {
			t.Errorf("Acquire returned after %v, want when the check ended", waited)
		}
		s.Release()
		closePool(t, p)
	})
}

func TestDestroyReplacesBelowMin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		p := newPool(t, b.config())
		s := mustAcquire(t, p)
		synctest.Wait()
		s.Destroy()
		s.Destroy()
		s.Release() // all harmless after the first
		synctest.Wait()
		st := p.Stat()
		if st.DestroyedError != 1 || st.Total != 5 || st.Created != 6 || st.InUse != 0 {
			t.Errorf("stat = %+v", st)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

func TestDestroyServesWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		p := newPool(t, cfg)
		s := mustAcquire(t, p)
		got := make(chan *sessionpool.Session[*fakeConn])
		go func() { got <- mustAcquire(t, p) }()
		synctest.Wait()
		s.Destroy()
		s2 := <-got
		if s2.ID() == s.ID() {
			t.Error("waiter got the destroyed session")
		}
		s2.Release()
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

func TestReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		p := newPool(t, b.config())
		ss := acquireN(t, p, 2)
		synctest.Wait()
		before := map[uint64]bool{}
		for _, s := range ss {
			before[s.ID()] = true
		}
		p.Reset()
		synctest.Wait()
		st := p.Stat()
		if st.DestroyedReset != 3 || st.InUse != 2 || st.Total != 5 {
			t.Errorf("after Reset: %+v", st)
		}
		releaseAll(ss)
		synctest.Wait()
		st = p.Stat()
		if st.DestroyedReset != 5 || st.Total != 5 || st.Idle != 5 {
			t.Errorf("after release: %+v", st)
		}
		for _, s := range acquireN(t, p, 5) {
			if before[s.ID()] {
				t.Errorf("session %d from before Reset handed out", s.ID())
			}
			s.Release()
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestResetDiscardsConnectInFlight: a session connected before Reset is
// not used.
func TestResetDiscardsConnectInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{connectFn: func(ctx context.Context, n int) error {
			time.Sleep(time.Duration(n) * time.Second)
			return nil
		}}
		cfg := b.config()
		cfg.MinSessions = 1
		p := newPool(t, cfg)
		p.Warm()
		synctest.Wait()
		p.Reset()
		time.Sleep(time.Minute)
		st := p.Stat()
		if st.Created != 2 || st.DestroyedReset != 1 || st.Total != 1 {
			t.Errorf("stat = %+v", st)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

func TestMaxLifetime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxLifetime, cfg.IdleTimeout, cfg.Check = 2, time.Hour, -1, nil
		p := newPool(t, cfg)
		ss := acquireN(t, p, 2)
		synctest.Wait()
		old := ss[0].ID()
		ss[1].Release()
		time.Sleep(time.Hour + time.Second)
		synctest.Wait()
		// The idle one was retired in the background and replaced.
		st := p.Stat()
		if st.DestroyedLifetime != 1 || st.Total != 2 {
			t.Errorf("after an hour: %+v", st)
		}
		// The one in use is retired on release, never handed out again.
		ss[0].Release()
		synctest.Wait()
		for _, s := range acquireN(t, p, 2) {
			if s.ID() == old || time.Since(s.CreatedAt()) >= time.Hour {
				t.Errorf("handed out session %d created %v ago", s.ID(), time.Since(s.CreatedAt()))
			}
			s.Release()
		}
		st = p.Stat()
		if st.DestroyedLifetime != 2 || st.Total != 2 {
			t.Errorf("after release: %+v", st)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

func TestCloseWakesWaitersAndWaitsForInUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		p := newPool(t, cfg)
		s := mustAcquire(t, p)
		waitErr := make(chan error)
		go func() {
			_, err := p.Acquire(context.Background())
			waitErr <- err
		}()
		synctest.Wait()
		closed := make(chan error)
		go func() { closed <- p.Close(context.Background()) }()
		if err := <-waitErr; !errors.Is(err, sessionpool.ErrPoolClosed) {
			t.Errorf("waiter got %v, want ErrPoolClosed", err)
		}
		synctest.Wait()
		select {
		case err := <-closed:
			t.Fatalf("Close returned %v while a session is in use", err)
		default:
		}
		s.Release()
		if err := <-closed; err != nil {
			t.Errorf("Close = %v", err)
		}
		b.verifyAllClosed(t)
		if _, err := p.Acquire(context.Background()); !errors.Is(err, sessionpool.ErrPoolClosed) {
			t.Errorf("Acquire after Close = %v", err)
		}
	})
}

func TestCloseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		p := newPool(t, b.config())
		s := mustAcquire(t, p)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close = %v, want deadline exceeded", err)
		}
		s.Release() // closed on release
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestCloseCancelsConnects: Close ends connects in flight and waits for them.
func TestCloseCancelsConnects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{connectFn: func(ctx context.Context, n int) error {
			<-ctx.Done()
			return ctx.Err()
		}}
		p := newPool(t, b.config())
		p.Warm()
		synctest.Wait()
		if st := p.Stat(); st.Connecting != 5 {
			t.Fatalf("stat = %+v", st)
		}
		closePool(t, p)
		if st := p.Stat(); st.Connecting != 0 || !st.Closed || st.ConnectFailures != 0 {
			t.Errorf("stat = %+v", st)
		}
	})
}

// TestEventsNotUnderLock calls Stat from OnEvent (it would deadlock under
// the lock) and checks the seed's logging list is covered.
func TestEventsNotUnderLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		b.checkFn = func(ctx context.Context, c *fakeConn) error { return nil }
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		var mu sync.Mutex
		seen := map[sessionpool.EventKind]int{}
		var p *sessionpool.Pool[*fakeConn]
		cfg.OnEvent = func(e sessionpool.Event) {
			_ = p.Stat()
			mu.Lock()
			seen[e.Kind]++
			mu.Unlock()
		}
		p = newPool(t, cfg)
		s := mustAcquire(t, p)
		go func() {
			s, err := p.Acquire(context.Background())
			if err == nil {
				s.Destroy()
			}
		}()
		synctest.Wait()
		s.Release()
		synctest.Wait()
		s = mustAcquire(t, p)
		go p.Acquire(context.Background())
		time.Sleep(time.Minute) // queue time-out
		p.Reset()
		s.Release()
		closePool(t, p)
		mu.Lock()
		defer mu.Unlock()
		for k := sessionpool.EventInit; k <= sessionpool.EventClosed; k++ {
			switch k {
			case sessionpool.EventConnectFailed, sessionpool.EventAcquireCanceled, sessionpool.EventQueueFull, sessionpool.EventHealthCheck:
				continue // covered by other tests
			}
			if seen[k] == 0 {
				t.Errorf("no %v event (seen %v)", k, seen)
			}
		}
	})
}

// TestLifetimeExpiredNotHandedToWaiter: a session past MaxLifetime
// released while a caller waits is replaced, and the caller gets the new one.
func TestLifetimeExpiredNotHandedToWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions, cfg.MaxLifetime, cfg.QueueTimeout = 1, 1, time.Hour, -1
		p := newPool(t, cfg)
		s := mustAcquire(t, p)
		got := make(chan *sessionpool.Session[*fakeConn])
		time.Sleep(2 * time.Hour)
		go func() { got <- mustAcquire(t, p) }()
		synctest.Wait()
		old := s.ID()
		s.Release()
		s2 := <-got
		if s2.ID() == old {
			t.Errorf("waiter got the expired session %d", old)
		}
		if st := p.Stat(); st.DestroyedLifetime != 1 || st.Created != 2 {
			t.Errorf("stat = %+v", st)
		}
		s2.Release()
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestAbandonedConnectServesNextWaiter: the session connected for a caller
// who gave up goes to the next waiter, not to idle.
func TestAbandonedConnectServesNextWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{connectFn: func(ctx context.Context, n int) error {
			time.Sleep(10 * time.Second)
			return nil
		}}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = -1, 1
		p := newPool(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := p.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("first Acquire = %v", err)
		}
		start := time.Now()
		s := mustAcquire(t, p) // waits for the connect the first caller started
		if d := time.Since(start); d != 9*time.Second {
			t.Errorf("second caller served after %v, want 9s (the rest of that connect)", d)
		}
		if st := p.Stat(); st.Created != 1 || st.Connecting != 0 {
			t.Errorf("stat = %+v", st)
		}
		s.Release()
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestRefillAfterFailedGrowth: a failed connect above MinSessions does not
// leave the pool unable to refill when it later drops below the minimum.
func TestRefillAfterFailedGrowth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{connectFn: func(ctx context.Context, n int) error {
			if n == 3 {
				return errors.New("refused")
			}
			return nil
		}}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 2, 5
		p := newPool(t, cfg)
		ss := acquireN(t, p, 2)
		synctest.Wait()
		var ce *sessionpool.ConnectError
		if _, err := p.Acquire(context.Background()); !errors.As(err, &ce) {
			t.Fatalf("third Acquire = %v, want *ConnectError", err)
		}
		ss[0].Destroy()
		synctest.Wait()
		if st := p.Stat(); st.Total != 2 || st.Created != 3 {
			t.Errorf("after Destroy: %+v (want refilled to 2)", st)
		}
		ss[1].Release()
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestCloseDuringCheck: Close cancels a running check and waits for it; the
// cancelled check is not counted as a failure.
func TestCloseDuringCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		b.checkFn = func(ctx context.Context, c *fakeConn) error {
			<-ctx.Done()
			return ctx.Err()
		}
		cfg := b.config()
		cfg.MinSessions, cfg.HealthCheckTimeout = 1, -1
		p := newPool(t, cfg)
		mustAcquire(t, p).Release()
		for i := 0; p.Stat().Checking == 0; i++ {
			if i > 400 {
				t.Fatal("no health check within 6 min")
			}
			time.Sleep(time.Second)
		}
		closePool(t, p)
		if st := p.Stat(); st.HealthCheckFailures != 0 || st.Checking != 0 || st.DestroyedClosed != 1 {
			t.Errorf("stat = %+v", st)
		}
		b.verifyAllClosed(t)
	})
}
