package sessionpool_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// TestSetLimitsGrowServesWaiter: a waiter queued at the old maximum is
// served as soon as SetLimits raises it.
func TestSetLimitsGrowServesWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = -1, 1
		p := newPool(t, cfg)
		s1 := mustAcquire(t, p)
		got := make(chan *sessionpool.Session[*fakeConn], 1)
		go func() {
			s, err := p.Acquire(context.Background())
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- s
		}()
		synctest.Wait()
		if st := p.Stat(); st.Waiting != 1 {
			t.Fatalf("waiting = %d, want 1", st.Waiting)
		}
		if err := p.SetLimits(sessionpool.Config[*fakeConn]{MinSessions: -1, MaxSessions: 2}); err != nil {
			t.Fatal(err)
		}
		s2 := <-got
		if st := p.Stat(); st.MaxSessions != 2 || st.InUse != 2 {
			t.Errorf("after grow: %+v", st)
		}
		s1.Release()
		s2.Release()
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestSetLimitsShrinkKeepsCallsInUse: lowering the maximum below the
// sessions in use cuts none of them; each is closed at its release until
// the pool is within the new maximum, and a lower MaxWaiters applies to
// the next caller.
func TestSetLimitsShrinkKeepsCallsInUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions, cfg.MaxWaiters = -1, 3, 5
		p := newPool(t, cfg)
		var in []*sessionpool.Session[*fakeConn]
		for range 3 {
			in = append(in, mustAcquire(t, p))
		}
		waiter := make(chan *sessionpool.Session[*fakeConn], 1)
		go func() {
			s, err := p.Acquire(context.Background())
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			waiter <- s
		}()
		synctest.Wait()
		if err := p.SetLimits(sessionpool.Config[*fakeConn]{MinSessions: -1, MaxSessions: 1, MaxWaiters: 1}); err != nil {
			t.Fatal(err)
		}
		b.mu.Lock()
		for _, c := range b.conns {
			if c.closed != 0 {
				t.Errorf("session %d in use was closed by SetLimits", c.id)
			}
		}
		b.mu.Unlock()
		if st := p.Stat(); st.InUse != 3 || st.MaxSessions != 1 || st.Waiting != 1 {
			t.Errorf("after shrink: %+v", st)
		}
		// One caller waits already: the new MaxWaiters (1) is reached.
		if _, err := p.Acquire(context.Background()); !errors.Is(err, sessionpool.ErrQueueFull) {
			t.Errorf("acquire past the new MaxWaiters: %v, want ErrQueueFull", err)
		}
		in[0].Release()
		in[1].Release()
		if st := p.Stat(); st.Total != 1 || st.Idle != 0 || st.Waiting != 1 {
			t.Errorf("after two releases: %+v, want 1 open and the waiter still waiting", st)
		}
		in[2].Release() // within the maximum now: it goes to the waiter
		w := <-waiter
		if st := p.Stat(); st.Total != 1 || st.InUse != 1 {
			t.Errorf("after the last release: %+v, want 1 in use", st)
		}
		w.Release()
		// A bad maximum is refused and changes nothing.
		if err := p.SetLimits(sessionpool.Config[*fakeConn]{MaxSessions: -2}); err == nil {
			t.Error("SetLimits(MaxSessions -2) succeeded")
		}
		if st := p.Stat(); st.MaxSessions != 1 {
			t.Errorf("max after a refused SetLimits = %d", st.MaxSessions)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestSetLimitsIdleTimeout: an idle time-out shortened by SetLimits
// applies to sessions already idle.
func TestSetLimitsIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions, cfg.IdleTimeout = -1, 2, time.Hour
		p := newPool(t, cfg)
		s := mustAcquire(t, p)
		s.Release()
		if err := p.SetLimits(sessionpool.Config[*fakeConn]{MinSessions: -1, MaxSessions: 2, IdleTimeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if st := p.Stat(); st.Total != 0 {
			t.Errorf("after the new idle time-out: %+v, want none open", st)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestSetLimitsQueueTimeout: a queue time-out shortened by SetLimits
// applies to the callers already waiting (counted from their arrival) and
// to the next ones.
func TestSetLimitsQueueTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions, cfg.QueueTimeout = -1, 1, time.Hour
		p := newPool(t, cfg)
		s := mustAcquire(t, p)
		errc := make(chan error, 2)
		wait := func() {
			_, err := p.Acquire(context.Background())
			errc <- err
		}
		go wait()
		synctest.Wait()
		time.Sleep(30 * time.Second)
		if err := p.SetLimits(sessionpool.Config[*fakeConn]{MinSessions: -1, MaxSessions: 1, QueueTimeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		go wait()
		synctest.Wait()
		time.Sleep(31 * time.Second) // the first waiter's minute is over
		synctest.Wait()
		if err := <-errc; !errors.Is(err, sessionpool.ErrQueueTimeout) {
			t.Errorf("first waiter: %v, want ErrQueueTimeout", err)
		}
		if st := p.Stat(); st.Waiting != 1 {
			t.Errorf("waiting = %d, want the second caller still waiting", st.Waiting)
		}
		time.Sleep(time.Minute)
		if err := <-errc; !errors.Is(err, sessionpool.ErrQueueTimeout) {
			t.Errorf("second waiter: %v, want ErrQueueTimeout", err)
		}
		s.Release()
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}
