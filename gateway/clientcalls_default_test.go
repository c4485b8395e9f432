package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/pool"
)

// testRemote makes a request come from another address: the gateway under
// test sees X-Test-Remote as the client's address (tests dial 127.0.0.1
// only).
const testRemote = "X-Test-Remote"

// heldGateway serves a gateway over one replica of fdtest.HoldApp with 4 slots
// and max_calls_per_client at its derived default (2 here); release ends
// the held calls (also when the test fails before it does).
func heldGateway(t *testing.T, keys ...string) (srv *httptest.Server, sim *gradiotest.Server, release func()) {
	t.Helper()
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	sim = gradiotest.NewServer(fdtest.HoldApp(gate))
	t.Cleanup(sim.Close)
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{sim.URL}, MinConnections: 1, MaxConnections: 4}}
	cfg.Secrets.APIKeys = keys
	p, err := pool.New(cfg.PoolConfig(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	h := gateway.New(cfg, gateway.PoolBackend(p, cfg.Pool.MaxConnections), nil, gateway.NewMetrics(nil))
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get(testRemote); a != "" {
			r.RemoteAddr = a + ":40000"
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(release) // first: the held calls end before the servers close
	return srv, sim, release
}

// holdCalls starts n held calls with hdr; wait returns their answers.
func holdCalls(t *testing.T, url string, n int, hdr ...string) (wait func() []answer) {
	var wg sync.WaitGroup
	out := make([]answer, n)
	for i := range n {
		wg.Go(func() { out[i] = do(t, "POST", url+"/v1/predict/hold", `{"data":["x"]}`, hdr...) })
	}
	return func() []answer { wg.Wait(); return out }
}

func allOK(t *testing.T, who string, as []answer) {
	t.Helper()
	for _, a := range as {
		if a.status != 200 {
			t.Errorf("%s: a held call got %d %s", who, a.status, a.body)
		}
	}
}

// TestMaxCallsPerClientDefault: with max_calls_per_client at its default
// (half of the 4 slots: 2), a client past it is refused 429 while another
// is served, for an API key (two keys set) and for a non-loopback address
// (no keys). (issue 20 item 3)
func TestMaxCallsPerClientDefault(t *testing.T) {
	for _, tc := range []struct {
		name          string
		keys          []string
		greedy, other []string
	}{
		{"api key", []string{"key-greedy", "key-other"},
			[]string{"Authorization", "Bearer key-greedy"}, []string{"Authorization", "Bearer key-other"}},
		{"address without keys", nil, []string{testRemote, "192.0.2.7"}, []string{testRemote, "192.0.2.8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, sim, release := heldGateway(t, tc.keys...)
			greedy := holdCalls(t, srv.URL, 2, tc.greedy...)
			fdtest.WaitFor(t, "the greedy client's two calls running", func() bool { return sim.Snapshot().Running == 2 })
			for _, path := range []string{"/v1/predict/hold", "/gradio_api/call/hold"} {
				a := do(t, "POST", srv.URL+path, `{"data":["x"]}`, tc.greedy...)
				if a.status != 429 || errorCode(t, a.body) != "too_many_calls" || a.header.Get("Retry-After") == "" {
					t.Errorf("%s past the derived limit: %d %s", path, a.status, a.body)
				}
			}
			other := holdCalls(t, srv.URL, 1, tc.other...)
			fdtest.WaitFor(t, "the other client's call running", func() bool { return sim.Snapshot().Running == 3 })
			release()
			allOK(t, "greedy", greedy())
			allOK(t, "other", other())
		})
	}
}

// TestMaxCallsPerClientSeedUnthrottled: the seed's set-up, one web app on
// the gateway's host making every call for all its users, without API keys
// (or with one key), holds every slot: the derived limit (2 of 4) does not
// apply to it.
func TestMaxCallsPerClientSeedUnthrottled(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []string
		hdr  []string
	}{
		{"loopback without keys", nil, nil},
		{"one key", []string{"key-app"}, []string{"Authorization", "Bearer key-app"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, sim, release := heldGateway(t, tc.keys...)
			calls := holdCalls(t, srv.URL, 4, tc.hdr...)
			fdtest.WaitFor(t, "four calls of one client running", func() bool { return sim.Snapshot().Running == 4 })
			release()
			allOK(t, "the web app", calls())
		})
	}
}
