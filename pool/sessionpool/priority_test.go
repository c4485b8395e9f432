package sessionpool_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// queueWaiter starts an Acquire of class prio on p and waits until it is
// queued; its result arrives on the returned channel.
func queueWaiter(t *testing.T, p *sessionpool.Pool[*fakeConn], prio sessionpool.Priority, name string, got chan<- string) {
	t.Helper()
	go func() {
		s, err := p.AcquirePriority(context.Background(), prio)
		if err != nil {
			got <- name + ": " + err.Error()
			return
		}
		got <- name
		s.Release() // hand the session on to the next waiter
	}()
	synctest.Wait()
}

// TestPriorityOrder fills a one-session pool, queues waiters of mixed
// classes and checks that higher classes go first, FIFO within a class.
func TestPriorityOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		cfg.QueueTimeout = -1
		cfg.PriorityMaxWait = time.Hour
		p := newPool(t, cfg)
		held := mustAcquire(t, p)

		got := make(chan string, 8)
		for _, w := range []struct {
			prio sessionpool.Priority
			name string
		}{
			{sessionpool.PriorityNormal, "n1"},
			{sessionpool.PriorityLow, "l1"},
			{sessionpool.PriorityHigh, "h1"},
			{sessionpool.PriorityNormal, "n2"},
			{sessionpool.PriorityHigh, "h2"},
			{sessionpool.PriorityLow, "l2"},
		} {
			queueWaiter(t, p, w.prio, w.name, got)
			time.Sleep(time.Millisecond) // distinct arrival times
		}
		st := p.Stat()
		if st.Waiting != 6 || st.WaitingHigh != 2 || st.WaitingLow != 2 {
			t.Fatalf("Waiting %d, high %d, low %d; want 6, 2, 2", st.Waiting, st.WaitingHigh, st.WaitingLow)
		}
		held.Release() // each served waiter releases at once: the chain runs in order
		want := []string{"h1", "h2", "n1", "n2", "l1", "l2"}
		for i, w := range want {
			if g := <-got; g != w {
				t.Fatalf("served #%d = %s, want %s (order %v)", i, g, w, want)
			}
		}
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

// TestPriorityStarvationBound keeps a one-session pool busy with a steady
// stream of high-priority callers: a low-priority waiter is still served
// once it has waited PriorityMaxWait, at the first release after that.
func TestPriorityStarvationBound(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxWait time.Duration
		want    time.Duration // when the low waiter is served; 0: never within the test
	}{
		{"promoted after max wait", 5 * time.Second, 5 * time.Second},
		{"strict without bound", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &backend{}
				cfg := b.config()
				cfg.MinSessions, cfg.MaxSessions = 1, 1
				cfg.QueueTimeout = -1
				cfg.PriorityMaxWait = tc.maxWait
				p := newPool(t, cfg)
				held := mustAcquire(t, p)

				start := time.Now()
				lowCtx, cancelLow := context.WithCancel(context.Background())
				low := make(chan time.Duration, 1)
				go func() {
					s, err := p.AcquirePriority(lowCtx, sessionpool.PriorityLow)
					if err != nil {
						low <- -1
						return
					}
					low <- time.Since(start)
					s.Release()
				}()
				synctest.Wait()

				// Every second a high waiter arrives and the holder releases:
				// without the bound, the low waiter would never get a turn.
				var served time.Duration
				var hi chan *sessionpool.Session[*fakeConn]
				for range 20 {
					hi = make(chan *sessionpool.Session[*fakeConn], 1)
					go func() {
						s, err := p.AcquirePriority(context.Background(), sessionpool.PriorityHigh)
						if err != nil {
							t.Errorf("high: %v", err)
							close(hi)
							return
						}
						hi <- s
					}()
					synctest.Wait()
					time.Sleep(time.Second)
					held.Release()
					synctest.Wait()
					select {
					case served = <-low:
					default:
					}
					if served != 0 {
						break // the low waiter took the session; the high one gets it next
					}
					held = <-hi
				}
				switch {
				case tc.want == 0 && served != 0:
					t.Fatalf("low waiter served after %v with strict priority", served)
				case tc.want != 0 && served != tc.want:
					t.Fatalf("low waiter served after %v, want %v", served, tc.want)
				}
				cancelLow()
				if served == 0 {
					if d := <-low; d != -1 {
						t.Fatalf("low waiter: %v", d)
					}
				} else {
					held = <-hi // the low waiter released: the last high one has it
				}
				held.Release()
				closePool(t, p)
				b.verifyAllClosed(t)
			})
		})
	}
}

// TestPriorityQueueTimeoutEveryClass: the queue time-out is the same for
// every class, counted from each waiter's arrival.
func TestPriorityQueueTimeoutEveryClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{}
		cfg := b.config()
		cfg.MinSessions, cfg.MaxSessions = 1, 1
		cfg.QueueTimeout = 3 * time.Second
		cfg.PriorityMaxWait = -1
		p := newPool(t, cfg)
		held := mustAcquire(t, p)

		start := time.Now()
		type res struct {
			prio sessionpool.Priority
			err  error
			at   time.Duration
		}
		got := make(chan res, 3)
		for i, prio := range []sessionpool.Priority{sessionpool.PriorityHigh, sessionpool.PriorityLow, sessionpool.PriorityNormal} {
			time.Sleep(time.Duration(i) * time.Second / 2)
			go func() {
				_, err := p.AcquirePriority(context.Background(), prio)
				got <- res{prio, err, time.Since(start)}
			}()
			synctest.Wait()
		}
		want := map[sessionpool.Priority]time.Duration{
			sessionpool.PriorityHigh:   3 * time.Second,
			sessionpool.PriorityLow:    3*time.Second + 500*time.Millisecond,
			sessionpool.PriorityNormal: 3*time.Second + 1500*time.Millisecond,
		}
		for range 3 {
			r := <-got
			if !errors.Is(r.err, sessionpool.ErrQueueTimeout) || r.at != want[r.prio] {
				t.Errorf("%v waiter: %v after %v, want ErrQueueTimeout after %v", r.prio, r.err, r.at, want[r.prio])
			}
		}
		if st := p.Stat(); st.QueueTimeouts != 3 || st.Waiting != 0 {
			t.Errorf("QueueTimeouts %d Waiting %d, want 3, 0", st.QueueTimeouts, st.Waiting)
		}
		held.Release()
		closePool(t, p)
		b.verifyAllClosed(t)
	})
}

func TestParsePriority(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    sessionpool.Priority
		wantErr bool
	}{
		{"high", sessionpool.PriorityHigh, false},
		{" HIGH ", sessionpool.PriorityHigh, false},
		{"normal", sessionpool.PriorityNormal, false},
		{"", sessionpool.PriorityNormal, false},
		{"Low", sessionpool.PriorityLow, false},
		{"urgent", sessionpool.PriorityNormal, true},
	} {
		got, err := sessionpool.ParsePriority(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
	if p := sessionpool.ClampPriority(7); p != sessionpool.PriorityHigh {
		t.Errorf("AcquirePriority(ctx, 7) waits in %v, want clamped to high", p)
	}
	if p := sessionpool.ClampPriority(-9); p != sessionpool.PriorityLow {
		t.Errorf("AcquirePriority(ctx, -9) waits in %v, want clamped to low", p)
	}
}
