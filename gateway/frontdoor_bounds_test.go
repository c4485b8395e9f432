package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// openHeartbeat opens session's heartbeat stream and reads its first
// ALIVE; the stream stays open until the test ends.
func openHeartbeat(t *testing.T, base, session string) *http.Response {
	t.Helper()
	resp, err := http.Get(base + "/gradio_api/heartbeat/" + session)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("heartbeat: %d %s", resp.StatusCode, b)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestFrontDoorUnreadJoinsFreeTheirSlots: joins whose caller never opens
// queue/data (while it keeps a heartbeat stream, which keeps its session)
// take every slot of the replica; past frontdoor.read_grace they are
// cancelled at the replica and their slots freed, so that /v1 is served
// again. A call whose stream is open is not touched by the grace.
// (issue 20 "Why" 3)
func TestFrontDoorUnreadJoinsFreeTheirSlots(t *testing.T) {
	const maxConn = 3
	gate := make(chan struct{})
	srv, g, sims, p, _ := frontGatewayApps(t, []*gradiotest.App{holdApp(gate)}, func(c *gateway.Config) {
		c.Pool.MaxConnections = maxConn
		c.FrontDoor.ReadGrace = 100 * time.Millisecond
	})
	name := replicaName(sims[0])
	fn := fnIndexOf(t, srv.URL, "hold")
	openHeartbeat(t, srv.URL, "idle-reader")
	for i := range maxConn {
		if _, err := fdJoin(srv.URL, "idle-reader", fn, "x"+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	inUse := func() int { return p.Stats(context.Background()).Pools[name].InUseConnections }
	waitFor(t, "the unread calls cancelled and their slots free", func() bool {
		return g.FrontDoor().Stats().NotRead == maxConn && inUse() == 0 &&
			sims[0].Requests("cancel") == maxConn && sims[0].Snapshot().Running == 0
	})

	// A read call outlives the grace: its stream is open.
	id, err := fdJoin(srv.URL, "reader", fn, "kept")
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan map[string]map[string]any, 1)
	go func() {
		done, _ := fdStream(srv.URL, "reader")
		res <- done
	}()
	waitFor(t, "the read call running", func() bool { return sims[0].Snapshot().Running == 1 })
	time.Sleep(4 * 100 * time.Millisecond) // past the grace
	close(gate)
	done := <-res
	if m := done[id]; m == nil || m["success"] != true {
		t.Fatalf("the read call past the grace: %v, want success", m)
	}
	if n := g.FrontDoor().Stats().NotRead; n != maxConn {
		t.Errorf("%d calls cancelled as unread, want %d (the read one is not)", n, maxConn)
	}
}

// TestFrontDoorCallsCountPerClient: front-door joins count toward
// max_calls_per_client with /v1's calls: past it a join is answered 429
// in Gradio's shape with Retry-After, and the count is given back when
// the call ends. (issue 20 item 3)
func TestFrontDoorCallsCountPerClient(t *testing.T) {
	gate := make(chan struct{})
	srv, g, _, _, _ := frontGatewayApps(t, []*gradiotest.App{holdApp(gate)}, func(c *gateway.Config) {
		c.MaxCallsPerClient = 2
	})
	fn := fnIndexOf(t, srv.URL, "hold")
	ids := map[string]bool{}
	for _, in := range []string{"a", "b"} {
		id, err := fdJoin(srv.URL, "one-client", fn, in)
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
	done, err := fdStream(srv.URL, "one-client")
	if err != nil {
		t.Fatal(err)
	}
	for id := range ids {
		if done[id] == nil {
			t.Fatalf("call %s did not complete: %v", id, done)
		}
	}
	waitFor(t, "no call in flight", func() bool { return g.FrontDoor().Stats().InFlight == 0 })
	if got := fdCall(t, srv.URL, "other-session", fn, "c"); got != "released" {
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

// TestFrontDoorUploadDefaultsToMaxBodyBytes: over an app without
// max_file_size, one uploaded file may not exceed max_body_bytes (it was
// unbounded: issue 20 "Why" 4); a file within it is kept.
func TestFrontDoorUploadDefaultsToMaxBodyBytes(t *testing.T) {
	srv, g, _, _, _ := frontGatewayApps(t, []*gradiotest.App{nil}, func(c *gateway.Config) { c.MaxBodyBytes = 1000 })
	if resp, err := http.Get(srv.URL + "/config"); err == nil { // the reference replica is known
		resp.Body.Close()
	}
	upload := func(n int) int {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		w, _ := mw.CreateFormFile("files", "f.bin")
		_, _ = w.Write(bytes.Repeat([]byte{'x'}, n))
		_ = mw.Close()
		resp, err := http.Post(srv.URL+"/gradio_api/upload", mw.FormDataContentType(), &body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := upload(1001); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("upload of 1001 bytes with max_body_bytes 1000: %d, want 413", st)
	}
	if st := upload(1000); st != http.StatusOK {
		t.Fatalf("upload of 1000 bytes: %d, want 200", st)
	}
	if st := g.FrontDoor().Stats(); st.Uploads != 1 || st.UploadBytes != 1000 {
		t.Fatalf("kept %d uploads, %d bytes; want 1, 1000", st.Uploads, st.UploadBytes)
	}
}

// configRoot reads the front door's /config with the Host header host
// (and extra headers) and returns its root.
func configRoot(t *testing.T, base, host string, hdr ...string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/config", nil)
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Root string `json:"root"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &v) != nil {
		t.Fatalf("GET /config (Host %s): %d %.200s", host, resp.StatusCode, b)
	}
	return v.Root
}

// TestFrontDoorHostCheck: the root /config announces is not taken from a
// Host header naming another host (issue 20 "Why" 11): it is the listen
// address, or frontdoor.public_url when set; a loopback Host is taken as
// it is; X-Forwarded-Host counts only with trust_forwarded_headers.
func TestFrontDoorHostCheck(t *testing.T) {
	srv, _, _, _, _ := frontGatewayApps(t, []*gradiotest.App{nil}, func(c *gateway.Config) { c.Listen = "0.0.0.0:8080" })
	if got := configRoot(t, srv.URL, "evil.example"); strings.Contains(got, "evil") || got != "http://localhost:8080" {
		t.Errorf("Host evil.example: root %q, want the listen address http://localhost:8080", got)
	}
	if got := configRoot(t, srv.URL, "evil.example", "X-Forwarded-Host", "evil.example"); strings.Contains(got, "evil") {
		t.Errorf("X-Forwarded-Host without trust_forwarded_headers: root %q", got)
	}
	if got, want := configRoot(t, srv.URL, strings.TrimPrefix(srv.URL, "http://")), srv.URL; got != want {
		t.Errorf("loopback Host: root %q, want %q", got, want)
	}

	pub, _, _, _, _ := frontGatewayApps(t, []*gradiotest.App{nil}, func(c *gateway.Config) { c.FrontDoor.PublicURL = "https://gradio.example.com/app/" })
	if got := configRoot(t, pub.URL, "evil.example"); got != "https://gradio.example.com/app" {
		t.Errorf("with public_url, Host evil.example: root %q, want https://gradio.example.com/app", got)
	}

	fwd, _, _, _, _ := frontGatewayApps(t, []*gradiotest.App{nil}, func(c *gateway.Config) { c.FrontDoor.TrustForwardedHeaders = true })
	if got := configRoot(t, fwd.URL, "internal:8080", "X-Forwarded-Host", "gradio.example.com", "X-Forwarded-Proto", "https"); got != "https://gradio.example.com" {
		t.Errorf("trusted forwarded headers: root %q, want https://gradio.example.com", got)
	}
}
