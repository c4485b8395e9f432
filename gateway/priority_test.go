package gateway_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/pool"
)

// prioBackend is the fake backend recording the priority class each call
// is given.
type prioBackend struct {
	*fake
	mu   sync.Mutex
	seen []pool.Priority
}

func (b *prioBackend) Predict(ctx context.Context, user string, opts pool.CallOptions, endpoint string, args []any) (*gateway.Result, error) {
	b.mu.Lock()
	b.seen = append(b.seen, opts.Priority)
	b.mu.Unlock()
	return b.fake.Predict(ctx, user, opts, endpoint, args)
}

func TestPriorityHeader(t *testing.T) {
	b := &prioBackend{fake: newFake()}
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{"http://r1"}}}
	srv := httptest.NewServer(gateway.New(cfg, b, slog.New(slog.DiscardHandler), nil))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		header string
		want   pool.Priority
	}{
		{"", pool.PriorityNormal},
		{"high", pool.PriorityHigh},
		{"Low", pool.PriorityLow},
		{" normal ", pool.PriorityNormal},
	} {
		b.mu.Lock()
		b.seen = nil
		b.mu.Unlock()
		var hdr []string
		if tc.header != "" {
			hdr = []string{gateway.PriorityHeader, tc.header}
		}
		a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`, hdr...)
		b.mu.Lock()
		seen := b.seen
		b.mu.Unlock()
		if a.status != 200 || len(seen) != 1 || seen[0] != tc.want {
			t.Errorf("header %q: %d %s, priority %v, want %v", tc.header, a.status, a.body, seen, tc.want)
		}
	}
	a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`, gateway.PriorityHeader, "urgent")
	if a.status != 400 || errorCode(t, a.body) != "bad_priority" {
		t.Errorf("bad priority: %d %s, want 400 bad_priority", a.status, a.body)
	}
}
