package gateway_test

import (
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestMaxCallsPerClient: one client (an API key) with its calls in flight
// at the limit gets 429 for the next, on /v1 and /gradio_api/call alike,
// while another client is served; a call ending frees its place.
func TestMaxCallsPerClient(t *testing.T) {
	srv, sims, _ := realGateway(t, 1, func(c *gateway.Config) {
		c.Secrets.APIKeys = []string{"key-greedy", "key-other"}
		c.MaxCallsPerClient = 2
		c.Pool.MaxConnections = 10
	})
	greedy := []string{"Authorization", "Bearer key-greedy"}
	other := []string{"Authorization", "Bearer key-other"}
	var wg sync.WaitGroup
	done := make(chan answer, 2)
	// Two slow calls of the greedy client: one on /v1, one on the REST
	// shape (it counts until the call ends, not until the POST returns).
	wg.Add(1)
	go func() {
		defer wg.Done()
		done <- do(t, "POST", srv.URL+"/v1/predict/slow", `{"data":[1.5]}`, greedy...)
	}()
	if a := do(t, "POST", srv.URL+"/gradio_api/call/slow", `{"data":[1.5]}`, greedy...); a.status != 200 {
		t.Fatalf("REST call: %d %s", a.status, a.body)
	}
	fdtest.WaitFor(t, "two slow calls running", func() bool { return sims[0].Snapshot().Running == 2 })
	for _, path := range []string{"/v1/predict/upper", "/gradio_api/call/upper"} {
		a := do(t, "POST", srv.URL+path, `{"data":["x"]}`, greedy...)
		if a.status != 429 || errorCode(t, a.body) != "too_many_calls" || a.header.Get("Retry-After") == "" {
			t.Errorf("%s past the client's limit: %d %s", path, a.status, a.body)
		}
	}
	if a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`, other...); a.status != 200 {
		t.Errorf("another client was refused: %d %s", a.status, a.body)
	}
	wg.Wait()
	if a := <-done; a.status != 200 {
		t.Fatalf("slow call: %d %s", a.status, a.body)
	}
	// Both slow calls end: the greedy client has its places back.
	fdtest.WaitFor(t, "the slow calls ended", func() bool { return sims[0].Snapshot().Running == 0 })
	fdtest.WaitFor(t, "the greedy client served again", func() bool {
		return do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`, greedy...).status == 200
	})
}
