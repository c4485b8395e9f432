package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorCallsCountPerClient: front-door joins count toward
// max_calls_per_client with /v1's calls: past it a join is answered 429
// in Gradio's shape with Retry-After, and the count is given back when
// the call ends. (issue 20 item 3)
func TestFrontDoorCallsCountPerClient(t *testing.T) {
	gate := make(chan struct{})
	srv, g, _, _, _ := frontGatewayApps(t, []*gradiotest.App{fdtest.HoldApp(gate)}, func(c *gateway.Config) {
		c.MaxCallsPerClient = 2
	})
	fn := fdtest.FnIndex(t, srv.URL, "hold")
	ids := map[string]bool{}
	for _, in := range []string{"a", "b"} {
		id, err := fdtest.Join(srv.URL, "one-client", fn, in)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	body, _ := json.Marshal(map[string]any{"data": []any{"c"}, "fn_index": fn, "session_hash": "other-session"})
	resp, err := http.Post(srv.URL+"/gradio_api/queue/join", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var d struct {
		Detail string `json:"detail"`
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || json.Unmarshal(b, &d) != nil || d.Detail == "" {
		t.Fatalf("third join of one client: %d Retry-After %q %s, want 429 with Retry-After and {\"detail\": ...}",
			resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	close(gate)
	done, err := fdtest.Stream(srv.URL, "one-client")
	if err != nil {
		t.Fatal(err)
	}
	for id := range ids {
		if done[id] == nil {
			t.Fatalf("call %s did not complete: %v", id, done)
		}
	}
	fdtest.WaitFor(t, "no call in flight", func() bool { return g.FrontDoor().Stats().InFlight == 0 })
	if got := fdtest.Call(t, srv.URL, "other-session", fn, "c"); got != "released" {
		t.Fatalf("join after the calls ended: %q", got)
	}
}

// TestFrontDoorSessionLimits: fresh session hashes (one heartbeat each,
// closed at once, as in issue 20 "Why" 9) make sessions up to
// frontdoor.max_sessions_per_client (then 429) and frontdoor.max_sessions
// (then 503), both in Gradio's shape with Retry-After; thousands of
// attempts past the limits keep the sessions and the heap bounded.
func TestFrontDoorSessionLimits(t *testing.T) {
	const perClient, total = 20, 30
	srv, g, _, _, logs := frontGatewayApps(t, []*gradiotest.App{nil}, func(c *gateway.Config) {
		c.FrontDoor.MaxSessionsPerClient = perClient
		c.FrontDoor.MaxSessions = total
		c.Secrets.APIKeys = []string{"key-a", "key-b"}
	})
	get := func(key, session string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/gradio_api/heartbeat/"+session, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() // a heartbeat stream: never read to its end
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			var d struct {
				Detail string `json:"detail"`
			}
			if json.Unmarshal(b, &d) != nil || d.Detail == "" {
				t.Fatalf("refused session: %d %s, want Gradio's {\"detail\": ...}", resp.StatusCode, b)
			}
		}
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	for i := range perClient {
		if st, _ := get("key-a", fmt.Sprintf("a%d", i)); st != http.StatusOK {
			t.Fatalf("session %d of key-a: %d, want 200", i, st)
		}
	}
	if st, ra := get("key-a", "a-over"); st != http.StatusTooManyRequests || ra == "" {
		t.Fatalf("session past max_sessions_per_client: %d Retry-After %q, want 429 with Retry-After", st, ra)
	}
	// A known session is still served: the limit is on new ones.
	if st, _ := get("key-a", "a0"); st != http.StatusOK {
		t.Fatalf("known session of a client at its limit: %d, want 200", st)
	}
	for i := range total - perClient {
		if st, _ := get("key-b", fmt.Sprintf("b%d", i)); st != http.StatusOK {
			t.Fatalf("session %d of key-b: %d, want 200", i, st)
		}
	}
	if st, ra := get("key-b", "b-over"); st != http.StatusServiceUnavailable || ra == "" {
		t.Fatalf("session past max_sessions: %d Retry-After %q, want 503 with Retry-After", st, ra)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	logged := len(logs.String())
	for i := range 3000 {
		key := []string{"key-a", "key-b"}[i%2]
		if st, _ := get(key, fmt.Sprintf("flood%d", i)); st == http.StatusOK {
			t.Fatalf("flood session %d accepted past the limits", i)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := g.FrontDoor().Stats()
	if st.Open != total || st.SessionsRefused < 3000 {
		t.Fatalf("after the flood: %d sessions open (want %d), %d refused", st.Open, total, st.SessionsRefused)
	}
	// The test keeps the access lines in memory: not the gateway's.
	logged = len(logs.String()) - logged
	// Generous (1 MiB): 3000 kept sessions would take 2 MiB more.
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc) - int64(logged); grew > 1<<20 {
		t.Errorf("heap grew %d bytes besides %d bytes of logs over 3000 refused sessions", grew, logged)
	}
	t.Logf("heap before %d, after %d bytes, %d of them logs (3000 refused sessions)", before.HeapAlloc, after.HeapAlloc, logged)
}
