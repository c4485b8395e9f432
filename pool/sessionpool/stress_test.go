package sessionpool_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// stressConn is a session of the stress test's backend.
type stressConn struct {
	held   atomic.Int32 // workers holding it: must never exceed 1
	closed atomic.Int32 // Close calls: must end at exactly 1
}

// TestStress runs workers that acquire with random deadlines and
// cancellations, hold briefly, then release or destroy, while connects and
// checks fail at random, timers fire (short real durations) and Reset is
// called now and then. It checks the invariants throughout and that every
// session is closed exactly once after Close.
func TestStress(t *testing.T) {
	const (
		workers    = 40
		iterations = 150
		maxSess    = 8
	)
	var (
		mu    sync.Mutex
		conns []*stressConn
	)
	var violations atomic.Int64
	check := func(cond bool, msg string, args ...any) {
		if !cond {
			if violations.Add(1) <= 10 {
				t.Errorf(msg, args...)
			}
		}
	}
	cfg := sessionpool.Config[*stressConn]{
		Connect: func(ctx context.Context) (*stressConn, error) {
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			if rand.IntN(10) == 0 {
				return nil, errors.New("connect fault")
			}
			c := &stressConn{}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			return c, nil
		},
		Close: func(c *stressConn) {
			check(c.held.Load() == 0, "closing a session that is held")
			c.closed.Add(1)
		},
		Check: func(ctx context.Context, c *stressConn) error {
			check(c.held.Load() == 0, "checking a session that is held")
			if rand.IntN(5) == 0 {
				return errors.New("check fault")
			}
			return nil
		},
		MinSessions:         3,
		MaxSessions:         maxSess,
		MaxWaiters:          30,
		QueueTimeout:        20 * time.Millisecond,
		IdleTimeout:         10 * time.Millisecond,
		HealthCheckInterval: 5 * time.Millisecond,
		HealthCheckMax:      2,
		UnhealthyAfter:      2,
		MaxLifetime:         40 * time.Millisecond,
		RetryDelay:          time.Millisecond,
		MaxRetryDelay:       4 * time.Millisecond,
	}
	var p *sessionpool.Pool[*stressConn]
	invariants := func(st sessionpool.Stat) {
		check(st.Total+st.Connecting <= maxSess, "total %d + connecting %d > max", st.Total, st.Connecting)
		check(st.Idle+st.InUse+st.Checking == st.Total, "idle+inuse+checking != total: %+v", st)
		check(st.Waiting <= 30, "waiting %d > MaxWaiters", st.Waiting)
		check(st.Healthy+st.Unhealthy == st.Total, "healthy+unhealthy != total: %+v", st)
		check(st.Idle == 0 || st.Waiting == 0, "idle sessions while callers wait: %+v", st)
	}
	cfg.OnEvent = func(e sessionpool.Event) {
		check(e.Total <= maxSess, "event %v: total %d > max", e.Kind, e.Total)
	}
	p, err := sessionpool.New(cfg)
	if err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
				invariants(p.Stat())
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()

	var held atomic.Int32
	var served, failed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range iterations {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(60))*time.Millisecond)
				if rand.IntN(10) == 0 {
					cancel() // already cancelled
				}
				if rand.IntN(10) == 0 {
					time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond) // let timers fire
				}
				s, err := p.Acquire(ctx)
				cancel()
				if err != nil {
					failed.Add(1)
					var ce *sessionpool.ConnectError
					check(errors.Is(err, sessionpool.ErrQueueTimeout) || errors.Is(err, sessionpool.ErrQueueFull) ||
						errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &ce),
						"unexpected Acquire error %v", err)
					continue
				}
				served.Add(1)
				c := s.Value()
				check(c.held.Add(1) == 1, "session handed to two holders")
				check(c.closed.Load() == 0, "handed out a closed session")
				check(held.Add(1) <= maxSess, "more than max sessions held")
				hold := time.Duration(rand.IntN(300)) * time.Microsecond
				if rand.IntN(50) == 0 {
					hold = 25 * time.Millisecond // a long call: makes waiters time out
				}
				time.Sleep(hold)
				held.Add(-1)
				c.held.Add(-1)
				switch r := rand.IntN(1000); {
				case r < 150:
					s.Destroy()
				case r < 153:
					p.Reset()
					s.Release()
				default:
					s.Release()
				}
				s.Release() // double release is harmless
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	invariants(p.Stat())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	st := p.Stat()
	if st.Total != 0 || st.Connecting != 0 || st.Waiting != 0 || st.InUse != 0 {
		t.Errorf("after Close: %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, c := range conns {
		if n := c.closed.Load(); n != 1 {
			t.Errorf("session %d closed %d times", i, n)
		}
	}
	if int64(len(conns)) != st.Created || st.Destroyed() != st.Created {
		t.Errorf("connected %d, Created %d, Destroyed %d", len(conns), st.Created, st.Destroyed())
	}
	if served.Load() == 0 {
		t.Error("no Acquire succeeded")
	}
	t.Logf("served %d, failed %d; stat %+v", served.Load(), failed.Load(), st)
}
