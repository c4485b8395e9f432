package frontdoor_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gradiopool/gradiopool/gateway/frontdoor"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
	"github.com/gradiopool/gradiopool/pool"
)

// The harness of the front door's behaviour tests: simulated replicas, a
// pool over them, the front door over the pool and its routes on an HTTP
// server, as the gateway mounts them, without the gateway. The package's
// one TestMain (frontdoor_internal_test.go) checks for leaked goroutines.

// config is what a test may change before its front door is built: the
// pool's configuration and the front door's.
type config struct {
	Pool      pool.Config
	FrontDoor frontdoor.Config
}

// newDoor is the front door over a real pool of n simulated replicas with
// Gradio's default concurrency (one call at a time per endpoint, as the
// conformance suite expects), served at the returned server's URL.
func newDoor(t *testing.T, n int, mod func(*config)) (*httptest.Server, *frontdoor.FrontDoor, []*gradiotest.Server, *pool.Pool) {
	t.Helper()
	sims, urls := fdtest.Replicas(t, make([]*gradiotest.App, n), nil)
	srv, fd, p := newDoorOver(t, urls, mod)
	return srv, fd, sims, p
}

// newDoorOver is the front door over a real pool of the replicas at
// urls, in that pool order (min 1, max 8 sessions each; mod changes the
// configuration first).
func newDoorOver(t *testing.T, urls []string, mod func(*config)) (*httptest.Server, *frontdoor.FrontDoor, *pool.Pool) {
	t.Helper()
	return serveDoor(t, urls, nil, mod)
}

// newDoorApps is newDoor with one simulated replica per app (nil: the
// default app), the pool's and the front door's logs (JSON) in the
// returned buffer.
func newDoorApps(t *testing.T, apps []*gradiotest.App, mod func(*config)) (*httptest.Server, *frontdoor.FrontDoor, []*gradiotest.Server, *pool.Pool, *logbuf.Buffer) {
	t.Helper()
	sims, urls := fdtest.Replicas(t, apps, nil)
	logs, logger := fdtest.JSONLogs()
	srv, fd, p := serveDoor(t, urls, logger, mod)
	return srv, fd, sims, p, logs
}

// newDoorMode is newDoor over simulated replicas of one Gradio
// generation, one per app (nil: the default app).
func newDoorMode(t *testing.T, mode gradiotest.Mode, apps []*gradiotest.App, mod func(*config)) (*httptest.Server, *frontdoor.FrontDoor, []*gradiotest.Server) {
	t.Helper()
	modes := make([]gradiotest.Mode, len(apps))
	for i := range modes {
		modes[i] = mode
	}
	return newDoorModes(t, modes, apps, mod)
}

// newDoorModes is newDoor over one simulated replica per mode (a replica
// set mixing Gradio generations), each serving apps[i] (nil: the default
// app), in that pool order.
func newDoorModes(t *testing.T, modes []gradiotest.Mode, apps []*gradiotest.App, mod func(*config)) (*httptest.Server, *frontdoor.FrontDoor, []*gradiotest.Server) {
	t.Helper()
	replicaApps := make([]*gradiotest.App, len(modes))
	copy(replicaApps, apps)
	sims, urls := fdtest.Replicas(t, replicaApps, func(i int, s *gradiotest.Server) { s.Mode = modes[i] })
	srv, fd, _ := newDoorOver(t, urls, mod)
	return srv, fd, sims
}

// serveDoor builds the pool over urls and its front door, and serves the
// front door's routes (nothing else) on a test server; everything is
// closed when the test ends. logger (nil: none) gets the pool's and the
// front door's logs.
func serveDoor(t *testing.T, urls []string, logger *slog.Logger, mod func(*config)) (*httptest.Server, *frontdoor.FrontDoor, *pool.Pool) {
	t.Helper()
	cfg := config{Pool: pool.Config{Replicas: urls, MinConnections: 1, MaxConnections: 8}}
	if mod != nil {
		mod(&cfg)
	}
	pc := cfg.Pool
	// One event budget per pool, shared by its replicas' clients and the
	// front door's relays, as the gateway gives its pool (not the
	// process's, which every test of the binary would share).
	pc.ClientOptions = append(pc.ClientOptions[:len(pc.ClientOptions):len(pc.ClientOptions)],
		gradio.WithEventBudget(gradio.NewEventBudget(gradio.DefaultEventBudgetBytes)))
	if logger != nil {
		pc.Logger = logger
		if cfg.FrontDoor.Logger == nil {
			cfg.FrontDoor.Logger = logger
		}
	}
	p, err := pool.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := frontdoor.New(p, cfg.FrontDoor)
	if err != nil {
		_ = p.Close(context.Background())
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, rt := range fd.Routes() {
		mux.HandleFunc(rt.Pattern, rt.Handler)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = fd.Close()
		_ = p.Close(context.Background())
	})
	return srv, fd, p
}
