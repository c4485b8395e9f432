package gateway_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/pool"
)

// The helpers of the gateway's tests that go through its Gradio front
// door (cluster, drain, reload, isolation, metrics...). The front door's
// own behaviour tests live beside it, in gateway/frontdoor (harness_test.go
// there builds a front door over a pool without the gateway); the Gradio
// protocol and official JS client helpers both use are in internal/fdtest.

// frontGateway is the gateway over a real pool of n simulated replicas
// with Gradio's default concurrency (one call at a time per endpoint, as
// the conformance suite expects), reached through its Gradio front door.
func frontGateway(t *testing.T, n int, mod func(*gateway.Config)) (*httptest.Server, *gateway.Gateway, []*gradiotest.Server, *pool.Pool) {
	t.Helper()
	sims, urls := fdtest.Replicas(t, make([]*gradiotest.App, n), nil)
	srv, g, p := frontGatewayOver(t, urls, mod)
	return srv, g, sims, p
}

// frontGatewayOver is a gateway with its front door over a real pool of
// the replicas at urls, in that pool order (min 1, max 8 sessions each;
// mod changes the configuration first).
func frontGatewayOver(t *testing.T, urls []string, mod func(*gateway.Config)) (*httptest.Server, *gateway.Gateway, *pool.Pool) {
	t.Helper()
	cfg := gateway.Config{Pool: pool.Config{Replicas: urls, MinConnections: 1, MaxConnections: 8}}
	if mod != nil {
		mod(&cfg)
	}
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(nil, metrics))
	if err != nil {
		t.Fatal(err)
	}
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	g := gateway.New(cfg, b, nil, metrics)
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = g.Close(context.Background())
		_ = p.Close(context.Background())
	})
	return srv, g, p
}
