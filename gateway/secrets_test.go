package gateway_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
	"github.com/gradiopool/gradiopool/pool"
)

// TestReplicaCredentialsNeverLeak: a replica URL carrying a password and a
// signed query (as private Spaces and proxies do) must not appear in any
// answer, log line or statistic when that replica cannot be reached.
func TestReplicaCredentialsNeverLeak(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there any more: every connect fails
	src := "http://gpuser:PASSWORD123@" + dead + "/app/?token=SECRET456&sig=SIG789"
	secrets := []string{"PASSWORD123", "SECRET456", "SIG789", "gpuser"}

	logs := &logbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{src}, MinConnections: 1, MaxConnections: 2}}
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(logger, metrics))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	srv := httptest.NewServer(gateway.New(cfg, b, logger, metrics))
	t.Cleanup(srv.Close)

	var seen []string
	for range 2 {
		a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`)
		if a.status < 500 {
			t.Fatalf("a dead replica answered %d %s", a.status, a.body)
		}
		seen = append(seen, "answer: "+a.body)
	}
	st, _ := json.Marshal(p.Stats(context.Background()))
	seen = append(seen, "stats: "+string(st), "logs: "+logs.String(), "metrics: "+do(t, "GET", srv.URL+"/metrics", "").body)
	for _, s := range seen {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("%q leaked in %.2000s", secret, s)
			}
		}
	}
	if !strings.Contains(logs.String(), "REDACTED") {
		t.Errorf("the connect failure was not logged with the redacted source: %.2000s", logs.String())
	}
}

// TestNoStoreEverywhere: answers that carry users' outputs, statistics or
// the app's config are never kept by a cache.
func TestNoStoreEverywhere(t *testing.T) {
	srv, _, _, _ := frontGateway(t, 1, nil)
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/predict/upper", `{"data":["x"]}`},
		{"POST", "/v1/submit/upper", `{"data":["x"]}`},
		{"POST", "/gradio_api/call/upper", `{"data":["x"]}`},
		{"GET", "/api/admin/pool-stats", ""},
		{"GET", "/metrics", ""},
		{"GET", "/config", ""},
		{"GET", "/gradio_api/info", ""},
		{"GET", "/healthz", ""},
	} {
		a := do(t, tc.method, srv.URL+tc.path, tc.body)
		if got := a.header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s %s: %d, Cache-Control %q", tc.method, tc.path, a.status, got)
		}
	}
	// The streams that carry outputs (queue/data, a REST call's GET) and
	// the session's heartbeat: only their headers are read.
	const session = "nostore00001"
	if _, err := fdtest.Join(srv.URL, session, fdtest.FnIndex(t, srv.URL, "upper"), "secret"); err != nil {
		t.Fatal(err)
	}
	var posted struct {
		EventID string `json:"event_id"`
	}
	if a := do(t, "POST", srv.URL+"/gradio_api/call/upper", `{"data":["secret"]}`); json.Unmarshal([]byte(a.body), &posted) != nil || posted.EventID == "" {
		t.Fatalf("POST /gradio_api/call/upper: %d %s", a.status, a.body)
	}
	for _, path := range []string{
		"/gradio_api/queue/data?session_hash=" + session,
		"/gradio_api/heartbeat/" + session,
		"/gradio_api/call/upper/" + posted.EventID,
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Cache-Control"); resp.StatusCode != http.StatusOK || got != "no-store" {
			t.Errorf("GET %s: %d, Cache-Control %q", path, resp.StatusCode, got)
		}
	}
}

// TestAppErrorTextNotLogged: gr.Error messages quote the user's input (the
// simulator's fail endpoint echoes it); the caller gets the message, the
// logs only its length and a keyed hash.
func TestAppErrorTextNotLogged(t *testing.T) {
	logs := &logbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, _, _ := realGatewayLogged(t, logger)
	const secret = "carol.secret@example.com"
	a := do(t, "POST", srv.URL+"/v1/predict/fail", `{"data":["`+secret+`"]}`)
	if a.status != 422 || !strings.Contains(a.body, secret) {
		t.Fatalf("the caller must get the app's message: %d %s", a.status, a.body)
	}
	resp := do(t, "POST", srv.URL+"/v1/submit/fail", `{"data":["`+secret+`"]}`)
	if !strings.Contains(resp.body, secret) {
		t.Fatalf("the stream must carry the app's message: %s", resp.body)
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the app's error text (with the user's input) was logged: %.3000s", logs.String())
	}
	if !strings.Contains(logs.String(), `"error_hash"`) || !strings.Contains(logs.String(), `"error_len"`) {
		t.Errorf("no error_len/error_hash in the logs: %.3000s", logs.String())
	}
}

// realGatewayLogged is realGateway (one replica) with logger for the pool
// and the gateway.
func realGatewayLogged(t *testing.T, logger *slog.Logger) (*httptest.Server, []*gradiotest.Server, *pool.Pool) {
	t.Helper()
	s := gradiotest.NewUnstartedServer(nil)
	s.DefaultConcurrencyLimit = -1
	s.Start()
	t.Cleanup(s.Close)
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{s.URL}, MinConnections: 1, MaxConnections: 4}}
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(logger, metrics))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	srv := httptest.NewServer(gateway.New(cfg, b, logger, metrics))
	t.Cleanup(srv.Close)
	return srv, []*gradiotest.Server{s}, p
}
