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

// TestFIFO500on50 queues 500 waiters on 50 busy sessions in a known order
// and releases one session at a time: each must go to the oldest waiter.
func TestFIFO500on50(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const sessions, waiters = 50, 500
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions, cfg.MaxWaiters = sessions, sessions, waiters
		p := newPool(t, cfg)

		held := make([]*sessionpool.Session[*fakeConn], 0, sessions)
		for range sessions {
			held = append(held, mustAcquire(t, p))
		}
		type served struct {
			who int
			s   *sessionpool.Session[*fakeConn]
		}
		got := make(chan served)
		for i := range waiters {
			go func() {
				s, err := p.Acquire(context.Background())
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				got <- served{i, s}
			}()
			synctest.Wait() // waiter i is now blocked in the queue
			if n := p.Stat().Waiting; n != i+1 {
				t.Fatalf("after starting waiter %d: Waiting = %d", i, n)
			}
		}
		// No barging: a newcomer arriving right after the first release
		// goes to the back of the queue instead of taking the session.
		newcomerCtx, cancelNewcomer := context.WithCancel(context.Background())
		newcomer := make(chan error)
		for k := range waiters {
			held[0].Release()
			if k == 0 {
				go func() {
					_, err := p.Acquire(newcomerCtx)
					newcomer <- err
				}()
				synctest.Wait()
			}
			r := <-got
			if r.who != k {
				t.Fatalf("release %d served waiter %d, want %d (FIFO)", k, r.who, k)
			}
			held[0] = r.s
		}
		if n := p.Stat().Waiting; n != 1 {
			t.Errorf("Waiting = %d, want the newcomer still queued", n)
		}
		cancelNewcomer()
		if err := <-newcomer; !errors.Is(err, context.Canceled) {
			t.Errorf("newcomer: %v, want canceled", err)
		}
		if st := p.Stat(); st.Waiting != 0 || st.InUse != sessions || st.EmptyAcquireCount < waiters {
			t.Errorf("stat = %+v", st)
		}
		for _, s := range held {
			s.Release()
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

func TestQueueTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		var mu sync.Mutex
		var kinds []sessionpool.EventKind
		cfg.OnEvent = func(e sessionpool.Event) {
			mu.Lock()
			kinds = append(kinds, e.Kind)
			mu.Unlock()
		}
		p := newPool(t, cfg)
		s := mustAcquire(t, p)
		start := time.Now()
		_, err := p.Acquire(context.Background())
		if !errors.Is(err, sessionpool.ErrQueueTimeout) {
			t.Fatalf("Acquire = %v, want ErrQueueTimeout", err)
		}
		if d := time.Since(start); d != sessionpool.DefaultQueueTimeout {
			t.Errorf("timed out after %v, want %v", d, sessionpool.DefaultQueueTimeout)
		}
		st := p.Stat()
		if st.QueueTimeouts != 1 || st.Waiting != 0 {
			t.Errorf("stat = %+v", st)
		}
		// Staggered waiters each get their own 30 s (one pool timer).
		errs := make(chan time.Duration, 2)
		for range 2 {
			go func() {
				t0 := time.Now()
				_, err := p.Acquire(context.Background())
				if !errors.Is(err, sessionpool.ErrQueueTimeout) {
					t.Errorf("Acquire = %v", err)
				}
				errs <- time.Since(t0)
			}()
			time.Sleep(10 * time.Second)
		}
		for range 2 {
			if d := <-errs; d != 30*time.Second {
				t.Errorf("waiter timed out after %v, want 30s", d)
			}
		}
		s.Release()
		closePool(t, p)
		mu.Lock()
		defer mu.Unlock()
		if !containsKind(kinds, sessionpool.EventQueueTimeout) || !containsKind(kinds, sessionpool.EventWaiterAdded) {
			t.Errorf("events %v lack queue_timeout or waiter_added", kinds)
		}
	})
}

func containsKind(ks []sessionpool.EventKind, k sessionpool.EventKind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func TestNoQueueTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions, cfg.QueueTimeout = 1, 1, -1
		p := newPool(t, cfg)
		s := mustAcquire(t, p)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		_, err := p.Acquire(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Hour {
			t.Errorf("Acquire = %v after %v, want deadline after 1h", err, time.Since(start))
		}
		if st := p.Stat(); st.CanceledAcquires != 1 || st.QueueTimeouts != 0 || st.Waiting != 0 {
			t.Errorf("stat = %+v", st)
		}
		s.Release()
		closePool(t, p)
	})
}

func TestAcquireCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		p := newPool(t, cfg)
		s := mustAcquire(t, p)

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := p.Acquire(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire(canceled ctx) = %v", err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, err := p.Acquire(ctx)
			done <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire = %v", err)
		}
		st := p.Stat()
		if st.CanceledAcquires != 2 || st.Waiting != 0 {
			t.Errorf("stat = %+v", st)
		}
		// The slot is not lost: the session serves the next caller.
		s.Release()
		s = mustAcquire(t, p)
		s.Release()
		closePool(t, p)
	})
}

func TestQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions, cfg.MaxWaiters = 1, 1, 2
		p := newPool(t, cfg)
		s := mustAcquire(t, p)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { p.Acquire(ctx) })
		}
		synctest.Wait()
		if _, err := p.Acquire(context.Background()); !errors.Is(err, sessionpool.ErrQueueFull) {
			t.Errorf("third waiter: %v, want ErrQueueFull", err)
		}
		if st := p.Stat(); st.QueueFull != 1 || st.Waiting != 2 {
			t.Errorf("stat = %+v", st)
		}
		cancel()
		wg.Wait()
		s.Release()
		closePool(t, p)
	})
}

// TestGrowthNoOvershoot starts many Acquires at once with slow connects:
// sessions being connected count against MaxSessions.
func TestGrowthNoOvershoot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{connectFn: func(ctx context.Context, n int) error {
			time.Sleep(time.Second)
			return nil
		}}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = -1, 10
		var mu sync.Mutex
		peak := 0
		cfg.OnEvent = func(e sessionpool.Event) {
			mu.Lock()
			peak = max(peak, e.Total)
			mu.Unlock()
		}
		p := newPool(t, cfg)
		var wg sync.WaitGroup
		var sessMu sync.Mutex
		var held []*sessionpool.Session[*fakeConn]
		for range 100 {
			wg.Go(func() {
				s, err := p.Acquire(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				sessMu.Lock()
				held = append(held, s)
				sessMu.Unlock()
				if st := p.Stat(); st.Total+st.Connecting > 10 {
					t.Errorf("overshoot: %+v", st)
				}
			})
		}
		synctest.Wait()
		if st := p.Stat(); st.Connecting != 10 || st.Waiting != 100 {
			t.Errorf("while connecting: %+v", st)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if st := p.Stat(); st.Total != 10 || st.InUse != 10 || st.Waiting != 90 {
			t.Errorf("after connect: %+v", st)
		}
		for done := 0; done < 100; {
			sessMu.Lock()
			batch := held
			held = nil
			sessMu.Unlock()
			for _, s := range batch {
				s.Release()
			}
			done += len(batch)
			synctest.Wait()
		}
		wg.Wait()
		if n := b.created(); n != 10 {
			t.Errorf("created %d sessions, want 10", n)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
		mu.Lock()
		defer mu.Unlock()
		if peak > 10 {
			t.Errorf("peak total %d > max 10", peak)
		}
	})
}

// TestConnectOutlivesCaller: the connect started for a caller that gave up
// keeps going (not cancelled, with the caller's values), and its session
// serves the next caller.
func TestConnectOutlivesCaller(t *testing.T) {
	type key struct{}
	synctest.Test(t, func(t *testing.T) {
		var sawValue, sawCancel bool
		b := &backend{connectFn: func(ctx context.Context, n int) error {
			sawValue = ctx.Value(key{}) == "v"
			time.Sleep(10 * time.Second)
			sawCancel = ctx.Err() != nil
			return nil
		}}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = -1, 1
		p := newPool(t, cfg)
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Second)
		defer cancel()
		if _, err := p.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire = %v", err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !sawValue || sawCancel {
			t.Errorf("connect ctx: value %v, canceled %v; want value, not canceled", sawValue, sawCancel)
		}
		if st := p.Stat(); st.Idle != 1 || st.Created != 1 {
			t.Errorf("stat = %+v", st)
		}
		s := mustAcquire(t, p)
		s.Release()
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestConnectErrorReachesWaiter: when every connect fails the caller gets a
// *ConnectError (after the last of the parallel connects, not the first),
// and the pool retries the refill with back-off.
func TestConnectErrorReachesWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		var mu sync.Mutex
		fail := true
		b := &backend{connectFn: func(ctx context.Context, n int) error {
			time.Sleep(time.Duration(n) * time.Second)
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return boom
			}
			return nil
		}}
		p := newPool(t, b.config())
		start := time.Now()
		_, err := p.Acquire(context.Background())
		var ce *sessionpool.ConnectError
		if !errors.As(err, &ce) || !errors.Is(err, boom) {
			t.Fatalf("Acquire = %v, want *ConnectError wrapping boom", err)
		}
		if d := time.Since(start); d != 5*time.Second {
			t.Errorf("error after %v, want 5s (the last of five connects)", d)
		}
		mu.Lock()
		fail = false
		mu.Unlock()
		// The refill retries after RetryDelay (1 s).
		time.Sleep(sessionpool.DefaultRetryDelay + time.Minute)
		synctest.Wait()
		if st := p.Stat(); st.Total != 5 || st.ConnectFailures != 5 {
			t.Errorf("after retry: %+v", st)
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestServedWhileCanceling cancels a waiter's context and releases a
// session in the same instant, many times: the pool hands the session to the
// waiter before it can leave the queue, and the waiter must pass it on. No
// session may be lost and the counters must agree.
func TestServedWhileCanceling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		p := newPool(t, cfg)
		s := mustAcquire(t, p)
		var got, canceled int64
		for range 40 {
			ctx, cancel := context.WithCancel(context.Background())
			res := make(chan error)
			var s2 *sessionpool.Session[*fakeConn]
			go func() {
				var err error
				s2, err = p.Acquire(ctx)
				res <- err
			}()
			synctest.Wait()
			cancel() // the waiter wakes for ctx, but Release may reach it first
			s.Release()
			if err := <-res; err == nil {
				got++
				s = s2
			} else {
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Acquire = %v", err)
				}
				canceled++
				s = mustAcquire(t, p) // the session came back
			}
		}
		st := p.Stat()
		if st.CanceledAcquires != canceled || st.AcquireCount != 1+got+canceled || st.InUse != 1 || st.Waiting != 0 {
			t.Errorf("got %d, canceled %d, stat %+v", got, canceled, st)
		}
		s.Release()
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}
