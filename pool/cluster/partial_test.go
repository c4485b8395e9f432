package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestOneGatewayLosesRedis: when one gateway loses Redis while the others
// still reach it (a failover reaches the gateways at different moments, a
// link is cut), the lost one keeps, for a lease TTL, to the leases Redis
// still counts for it, so the limit holds while the others keep granting
// from Redis; after that it serves its local share (a partial loss longer
// than the lease TTL is fail_open's trade). Before, it took its local share
// at once: limit 4, two gateways, one lease registered by the lost one,
// 3 + 2 = 5 calls at once.
func TestOneGatewayLosesRedis(t *testing.T) {
	addr := redistest.Start(t)
	toxi := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	link := toxiproxy.NewProxy(toxi, t.Name(), "127.0.0.1:0", addr)
	if err := link.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(link.Stop)
	// A long TTL, so that the steps below run well inside the lost
	// gateway's grace (at least TTL - tick - operation time-out = 4 s).
	const limit, ttl = 4, 9 * time.Second
	lost := gateway(t, link.Listen, "lost", limit, ttl)
	other := gateway(t, addr, "other", limit, ttl)
	ctx := context.Background()
	held, err := lost.Acquire(ctx, replica, pool.PriorityNormal)
	if err != nil {
		t.Fatal(err)
	}
	try := func(c interface {
		Acquire(context.Context, string, pool.Priority) (pool.Permit, error)
	}, d time.Duration) (pool.Permit, error) {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return c.Acquire(ctx, replica, pool.PriorityNormal)
	}

	link.Stop() // the lost gateway's connections closed, new ones refused
	waitUntil(t, "the lost gateway to notice (its next refresh fails)", func() bool { return !lost.RedisUp() })
	// The other gateway gets what Redis leaves: the limit minus the lost
	// one's registered lease.
	var others []pool.Permit
	for range limit - 1 {
		p, err := try(other, 5*time.Second)
		if err != nil {
			t.Fatalf("the gateway with Redis: %v", err)
		}
		others = append(others, p)
	}
	if p, err := try(other, 300*time.Millisecond); err == nil {
		p.Release()
		t.Fatal("the gateway with Redis got a 5th lease: the lost gateway's registered lease is not counted")
	}
	// The lost gateway, local now, takes no lease beyond the one Redis
	// counts for it...
	if p, err := try(lost, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			p.Release()
		}
		t.Fatalf("the lost gateway within its grace: %v, want to wait (it holds the one lease Redis counts)", err)
	}
	// ...but may reuse it.
	held.Release()
	reused, err := try(lost, time.Second)
	if err != nil {
		t.Fatalf("the lost gateway reusing its registered lease: %v", err)
	}
	// After the grace, its local share (limit / 2 gateways last seen).
	second, err := try(lost, 2*ttl)
	if err != nil {
		t.Fatalf("the lost gateway after its grace: %v, want its local share of 2", err)
	}
	for _, p := range append(others, reused, second) {
		p.Release()
	}
}
