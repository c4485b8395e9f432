package sessionpool_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// slowConnects is a backend whose connects take d.
func slowConnects(d time.Duration) *backend {
	return &backend{connectFn: func(ctx context.Context, _ int) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
}

// TestRenewBeforeLifetime: one warm session with a 1 h MaxLifetime and
// connects of 1 s. Its replacement connects before it is retired, so a
// caller probing every 250 ms for 3 h never waits for a connect; and a
// session in use when its lifetime ends finishes its call first.
func TestRenewBeforeLifetime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := slowConnects(time.Second)
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 2
		cfg.MaxLifetime = time.Hour
		cfg.IdleTimeout = -1
		cfg.HealthCheckInterval = -1
		p := newPool(t, cfg)
		p.Warm()
		time.Sleep(2 * time.Second)

		waited := 0
		for range 3 * 60 * 60 * 4 {
			start := time.Now()
			s := mustAcquire(t, p)
			if time.Since(start) > 0 {
				waited++
			}
			s.Release()
			time.Sleep(250 * time.Millisecond)
		}
		st := p.Stat()
		if waited != 0 || st.DestroyedLifetime < 2 || st.Renewals < 2 {
			t.Errorf("%d acquires waited; %d retired, %d renewed; want 0 waits, at least 2 each", waited, st.DestroyedLifetime, st.Renewals)
		}

		// In use across its retirement: the call is not cut.
		s := mustAcquire(t, p)
		id := s.ID()
		time.Sleep(2 * time.Hour)
		if s.ID() != id {
			t.Fatal("session handle changed while in use")
		}
		s.Release() // retired now
		synctest.Wait()
		if st2 := p.Stat(); st2.DestroyedLifetime != st.DestroyedLifetime+1 {
			t.Errorf("retired %d after release, want %d", st2.DestroyedLifetime, st.DestroyedLifetime+1)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestRenewBeforeIdleDisconnect: the app drops sessions idle for 10 min.
// An idle session is replaced before that, even at MinSessions, so the
// session lent after an hour of quiet has been idle less than 10 min.
func TestRenewBeforeIdleDisconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := slowConnects(time.Second)
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 2
		cfg.IdleDisconnect = 10 * time.Minute
		cfg.IdleTimeout = -1
		cfg.HealthCheckInterval = -1
		p := newPool(t, cfg)
		p.Warm()
		time.Sleep(time.Hour)
		start := time.Now()
		s := mustAcquire(t, p)
		if w := time.Since(start); w != 0 {
			t.Errorf("acquire waited %v after an hour idle", w)
		}
		if age := time.Since(s.CreatedAt()); age >= 10*time.Minute {
			t.Errorf("lent a session idle for %v: past the app's idle disconnect", age)
		}
		s.Release()
		st := p.Stat()
		if st.Renewals < 5 || st.DestroyedLifetime < 5 || st.Total != 1 {
			t.Errorf("renewed %d, retired %d, open %d; want about 6, 6, 1", st.Renewals, st.DestroyedLifetime, st.Total)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestRenewWithoutRoom: at MaxSessions there is no room for a replacement
// ahead; the session is retired and replaced afterwards (the old rule).
func TestRenewWithoutRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := slowConnects(time.Second)
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		cfg.MaxLifetime = time.Hour
		cfg.HealthCheckInterval = -1
		p := newPool(t, cfg)
		p.Warm()
		time.Sleep(2 * time.Hour)
		st := p.Stat()
		if st.Renewals != 0 || st.DestroyedLifetime < 1 || st.Total != 1 {
			t.Errorf("renewed %d, retired %d, open %d; want 0, >= 1, 1", st.Renewals, st.DestroyedLifetime, st.Total)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}
