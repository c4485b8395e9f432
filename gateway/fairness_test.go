package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// holdSlowCalls starts n slow(30) calls through /v1/predict with hdr and
// waits until the pool holds want sessions in all; the calls end at the
// test's end.
func holdSlowCalls(t *testing.T, base string, n, want int, hdr ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/predict/slow", strings.NewReader(`{"data":[30]}`))
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	fdtest.WaitFor(t, "the held calls to take their sessions", func() bool {
		var st struct {
			InUse int `json:"inUseConnections"`
		}
		a := do(t, "GET", base+"/api/admin/pool-stats", "")
		return json.Unmarshal([]byte(a.body), &st) == nil && st.InUse >= want
	})
}

// TestCallsPerClientBehindTrustedProxy (issue 33): behind a proxy on the
// gateway's host (trusted_proxies), each forwarded address is a client of
// its own: one that holds max_calls_per_client calls gets 429, another
// address is served. A peer outside trusted_proxies cannot spoof its way
// out of its limit with X-Forwarded-For.
func TestCallsPerClientBehindTrustedProxy(t *testing.T) {
	srv, _, _, _ := frontGateway(t, 1, func(c *gateway.Config) {
		c.TrustedProxies = []string{"127.0.0.1/32"}
		c.MaxCallsPerClient = 2
	})
	holdSlowCalls(t, srv.URL, 2, 2, "X-Forwarded-For", "198.51.100.1")
	if a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`, "X-Forwarded-For", "198.51.100.1"); a.status != http.StatusTooManyRequests || errorCode(t, a.body) != "too_many_calls" {
		t.Errorf("a third call of the busy client: %d %s, want 429 too_many_calls", a.status, a.body)
	}
	if a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`, "X-Forwarded-For", "198.51.100.2"); a.status != http.StatusOK {
		t.Errorf("another client behind the proxy: %d %s, want 200", a.status, a.body)
	}

	untrusted, _, _, _ := frontGateway(t, 1, func(c *gateway.Config) {
		c.TrustedProxies = []string{"10.99.0.0/16"} // not the test's 127.0.0.1
		c.MaxCallsPerClient = 2
	})
	holdSlowCalls(t, untrusted.URL, 2, 2, "X-Forwarded-For", "198.51.100.1")
	if a := do(t, "POST", untrusted.URL+"/v1/predict/upper", `{"data":["x"]}`, "X-Forwarded-For", "198.51.100.2"); a.status != http.StatusTooManyRequests {
		t.Errorf("a spoofed X-Forwarded-For from an untrusted peer: %d %s, want 429 (the peer's own limit)", a.status, a.body)
	}
	if a := do(t, "POST", untrusted.URL+"/v1/predict/upper", `{"data":["x"]}`, "Forwarded", "for=198.51.100.3"); a.status != http.StatusTooManyRequests {
		t.Errorf("a spoofed Forwarded from an untrusted peer: %d %s, want 429", a.status, a.body)
	}
}

// TestCallsPerUser (issue 33): a web app holding the gateway's single key
// serves many users; at the default max_calls_per_user (a quarter of the
// slots, at least 8: 8 of 1 × 16 here) one user holding eight calls gets
// 429 for a ninth, while another user and anonymous calls of the same key
// are served.
func TestCallsPerUser(t *testing.T) {
	srv, _, _, _ := frontGateway(t, 1, func(c *gateway.Config) {
		c.Secrets.APIKeys = []string{"the-app-key"}
		c.Pool.MaxConnections = 16
	})
	auth := []string{"Authorization", "Bearer the-app-key"}
	holdSlowCalls(t, srv.URL, 8, 8, append(auth, "X-Gradiopool-User", "greedy@example.com")...)
	a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`, append(auth, "X-Gradiopool-User", "Greedy@Example.com")...)
	if a.status != http.StatusTooManyRequests || errorCode(t, a.body) != "too_many_user_calls" {
		t.Errorf("a ninth call of the busy user: %d %s, want 429 too_many_user_calls", a.status, a.body)
	}
	for _, hdr := range [][]string{append(auth, "X-Gradiopool-User", "other@example.com"), auth} {
		if a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`, hdr...); a.status != http.StatusOK {
			t.Errorf("a call with %v: %d %s, want 200", hdr[2:], a.status, a.body)
		}
	}
	if a := do(t, "POST", srv.URL+"/gradio_api/call/upper", `{"data":["x"]}`, append(auth, "X-Gradiopool-User", "greedy@example.com")...); a.status != http.StatusTooManyRequests {
		t.Errorf("a REST call of the busy user: %d %s, want 429", a.status, a.body)
	}
}
