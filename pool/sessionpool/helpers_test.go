package sessionpool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// fakeConn is a session of the fake backend.
type fakeConn struct {
	id     int
	closed int // guarded by backend.mu
}

// backend is a fake replica: it counts connects and closes, and can be told
// to block or fail connects and checks.
type backend struct {
	mu        sync.Mutex
	conns     []*fakeConn
	attempts  int
	connectFn func(ctx context.Context, n int) error // n: 1-based connect number; nil: succeed
	checkFn   func(ctx context.Context, c *fakeConn) error
	checks    int
}

func (b *backend) connect(ctx context.Context) (*fakeConn, error) {
	b.mu.Lock()
	b.attempts++
	n := b.attempts
	fn := b.connectFn
	b.mu.Unlock()
	if fn != nil {
		if err := fn(ctx, n); err != nil {
			return nil, err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := &fakeConn{id: len(b.conns) + 1}
	b.conns = append(b.conns, c)
	return c, nil
}

func (b *backend) close(c *fakeConn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c.closed++
}

func (b *backend) check(ctx context.Context, c *fakeConn) error {
	b.mu.Lock()
	b.checks++
	fn := b.checkFn
	b.mu.Unlock()
	if fn != nil {
		return fn(ctx, c)
	}
	return nil
}

// verifyAllClosed checks that every connected session was closed exactly once.
func (b *backend) verifyAllClosed(t testing.TB) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, c := range b.conns {
		if c.closed != 1 {
			errs = append(errs, fmt.Errorf("session %d closed %d times", c.id, c.closed))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
}

func (b *backend) created() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns)
}

func (b *backend) config() sessionpool.Config[*fakeConn] {
	return sessionpool.Config[*fakeConn]{
		Connect: b.connect,
		Close:   b.close,
		Check:   b.check,
	}
}

func newPool(t testing.TB, cfg sessionpool.Config[*fakeConn]) *sessionpool.Pool[*fakeConn] {
	t.Helper()
	p, err := sessionpool.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustAcquire(t testing.TB, p *sessionpool.Pool[*fakeConn]) *sessionpool.Session[*fakeConn] {
	t.Helper()
	s, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return s
}

func closePool(t testing.TB, p *sessionpool.Pool[*fakeConn]) {
	t.Helper()
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
