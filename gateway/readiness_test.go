package gateway_test

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
	"github.com/gradiopool/gradiopool/pool"
)

// openGateway is Open (the start-up connect check included) served over
// httptest, closed at cleanup.
func openGateway(t *testing.T, cfg gateway.Config, opts ...gradio.Option) (*httptest.Server, *logbuf.Buffer) {
	t.Helper()
	logs := &logbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	g, err := gateway.Open(context.Background(), cfg, logger, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return srv, logs
}

func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + l.Addr().String()
	l.Close()
	return u
}

// pollReady polls /readyz n times and returns the distinct statuses seen.
func pollReady(t *testing.T, url string, n int) map[int]int {
	t.Helper()
	seen := map[int]int{}
	for range n {
		seen[do(t, "GET", url+"/readyz", "").status]++
		time.Sleep(20 * time.Millisecond)
	}
	return seen
}

// TestReadyzTruthful: over unreachable replicas /readyz is 503 before and
// after a call, every poll (no flapping), and gradiopool_ready agrees;
// over a live replica it turns 200 with no call (the start-up connect
// check) and stays so.
func TestReadyzTruthful(t *testing.T) {
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{closedURL(t), closedURL(t)},
		MinConnections: 1, MaxConnections: 2, ProbeInterval: 30 * time.Millisecond}}
	dead, logs := openGateway(t, cfg)
	if seen := pollReady(t, dead.URL, 15); seen[503] != 15 {
		t.Fatalf("readyz over unreachable replicas before any call: %v, want 503 every time", seen)
	}
	if a := do(t, "POST", dead.URL+"/v1/predict/upper", `{"data":["x"]}`); a.status < 500 {
		t.Fatalf("call over unreachable replicas: %d %s", a.status, a.body)
	}
	if seen := pollReady(t, dead.URL, 40); seen[503] != 40 {
		t.Fatalf("readyz after a failed call: %v, want 503 every time", seen)
	}
	if m := do(t, "GET", dead.URL+"/metrics", "").body; !strings.Contains(m, "gradiopool_ready 0") {
		t.Errorf("metrics do not say gradiopool_ready 0")
	}
	// The start-up check logged each replica's cause before any call.
	if !strings.Contains(logs.String(), "connect_failed") || !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("no connect failure with its cause in the logs:\n%s", logs.String())
	}

	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	live, _ := openGateway(t, gateway.Config{Pool: pool.Config{Replicas: []string{sim.URL}, MinConnections: -1, MaxConnections: 2}})
	fdtest.WaitFor(t, "readyz 200 without a call", func() bool { return do(t, "GET", live.URL+"/readyz", "").status == 200 })
	if seen := pollReady(t, live.URL, 15); seen[200] != 15 {
		t.Fatalf("readyz over a live replica: %v, want 200 every time", seen)
	}
	if n := sim.Executions("upper"); n != 0 {
		t.Errorf("the connect check ran %d calls", n)
	}
	if m := do(t, "GET", live.URL+"/metrics", "").body; !strings.Contains(m, "gradiopool_ready 1") {
		t.Errorf("metrics do not say gradiopool_ready 1")
	}
}

// TestPermanentFailureAtStart: a Space the Hub does not know is logged at
// start with the reason and shown as a permanent failure in pool-stats and
// /metrics; the other replica serves.
func TestPermanentFailureAtStart(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	hub := gradiotest.NewHub()
	t.Cleanup(hub.Close)
	hub.AddSpace("sim/good", sim)
	cfg := gateway.Config{HubURL: hub.URL, Pool: pool.Config{Replicas: []string{"sim/good", "sim/missing"},
		MinConnections: -1, MaxConnections: 2}}
	srv, logs := openGateway(t, cfg)
	fdtest.WaitFor(t, "the missing Space marked permanent", func() bool {
		return strings.Contains(do(t, "GET", srv.URL+"/metrics", "").body, `gradiopool_replica_permanent_failure{replica="missing"} 1`)
	})
	stats := do(t, "GET", srv.URL+"/api/admin/pool-stats", "").body
	if !strings.Contains(stats, `"permanentFailure":true`) {
		t.Errorf("pool-stats lack the permanent failure: %s", stats)
	}
	if !strings.Contains(logs.String(), "missing") || !strings.Contains(logs.String(), "connect_failed") {
		t.Errorf("the start-up log does not name the missing Space:\n%s", logs.String())
	}
	fdtest.WaitFor(t, "readyz 200 with one good replica", func() bool { return do(t, "GET", srv.URL+"/readyz", "").status == 200 })
}
