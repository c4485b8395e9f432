package pool_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

// capLimiter is a Limiter of n permits per replica that counts what it
// lends and gets back.
type capLimiter struct {
	mu       sync.Mutex
	n        int
	held     map[string]int
	peak     int
	lent     atomic.Int64
	returned atomic.Int64
	wake     chan struct{}
}

func newCapLimiter(n int) *capLimiter {
	return &capLimiter{n: n, held: map[string]int{}, wake: make(chan struct{}, 1)}
}

func (c *capLimiter) Acquire(ctx context.Context, replica string, _ pool.Priority) (pool.Permit, error) {
	for {
		c.mu.Lock()
		if c.held[replica] < c.n {
			c.held[replica]++
			c.peak = max(c.peak, c.held[replica])
			c.mu.Unlock()
			c.lent.Add(1)
			return &capPermit{c: c, replica: replica}, nil
		}
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *capLimiter) Waiting(string) int { return 0 }

type capPermit struct {
	c       *capLimiter
	replica string
	done    atomic.Bool
}

func (p *capPermit) Release() {
	if p.done.Swap(true) {
		return
	}
	p.c.mu.Lock()
	p.c.held[p.replica]--
	p.c.mu.Unlock()
	p.c.returned.Add(1)
	select {
	case p.c.wake <- struct{}{}:
	default:
	}
}

// TestLimiter: every lease takes a permit and gives it back, whatever way
// it ends; the Limiter's cap binds below MaxConnections; its wait is
// bounded by QueueTimeout.
func TestLimiter(t *testing.T) {
	lim := newCapLimiter(2)
	srvs := replicas(t, 1)
	p := newPool(t, pool.Config{Replicas: urls(srvs), MaxConnections: 5, Limiter: lim, QueueTimeout: 2 * time.Second}) // 20 calls through 2 permits on a loaded machine
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := p.Predict(ctxT(t), "", "/upper", "x"); err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	l, err := p.Acquire(ctxT(t), "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	l.MarkBroken()
	l.Release()
	if lim.peak > 2 {
		t.Errorf("%d permits held at once, the limiter has 2", lim.peak)
	}
	if lim.lent.Load() != lim.returned.Load() || lim.lent.Load() < 21 {
		t.Errorf("lent %d permits, got back %d", lim.lent.Load(), lim.returned.Load())
	}
	a, _ := p.Acquire(ctxT(t), "")
	b, _ := p.Acquire(ctxT(t), "")
	if _, err := p.Acquire(ctxT(t), ""); !errors.Is(err, pool.ErrQueueTimeout) {
		t.Errorf("third acquire with 2 permits: %v, want ErrQueueTimeout", err)
	}
	a.Release()
	b.Release()
	if lim.lent.Load() != lim.returned.Load() {
		t.Errorf("lent %d permits, got back %d", lim.lent.Load(), lim.returned.Load())
	}
}
