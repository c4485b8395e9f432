package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/internal/logbuf"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/internal/version"
	"github.com/gradiopool/gradiopool/pool"
)

func newGateway(t *testing.T, f *fake, mod func(*gateway.Config)) (*gateway.Gateway, *httptest.Server, *logbuf.Buffer) {
	t.Helper()
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{"http://r1"}}, MaxBodyBytes: 1024, KeepAliveInterval: 20 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	logs := &logbuf.Buffer{}
	g := gateway.New(cfg, f, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return g, srv, logs
}

type answer struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, url, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not a JSON error: %q", body)
	}
	return e.Error.Code
}

func TestPredictAnswers(t *testing.T) {
	f := newFake()
	_, srv, _ := newGateway(t, f, nil)
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string // error code, "" for success
		retryAfter       bool
	}{
		{"ok", "/v1/predict/upper", `{"data":["abc"]}`, 200, "", false},
		{"malformed json", "/v1/predict/upper", `{"data":[`, 400, "bad_json", false},
		{"no data", "/v1/predict/upper", `{}`, 400, "bad_json", false},
		{"two objects", "/v1/predict/upper", `{"data":["a"]}{}`, 400, "bad_json", false},
		{"data elsewhere", "/v1/predict/upper", `{"x":"data"}`, 400, "bad_json", false},
		// An object is keyword arguments since issue 24 (TestKeywordArguments); a
		// scalar is still neither a list nor an object.
		{"data neither list nor object", "/v1/predict/upper", `{"data":"a"}`, 400, "bad_json", false},
		{"data a number", "/v1/predict/upper", `{"data":1}`, 400, "bad_json", false},
		{"data null is no inputs", "/v1/predict/upper", `{"data":null}`, 400, "bad_arguments", false},
		{"wrong arity", "/v1/predict/upper", `{"data":["a","b"]}`, 400, "bad_arguments", false},
		{"unknown endpoint", "/v1/predict/nope", `{"data":[]}`, 404, "unknown_endpoint", false},
		{"too large", "/v1/predict/upper", `{"data":["` + strings.Repeat("x", 2000) + `"]}`, 413, "body_too_large", false},
		{"app error", "/v1/predict/fail", `{"data":[]}`, 422, "app_error", false},
		{"queue full", "/v1/predict/full", `{"data":[]}`, 503, "app_queue_full", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, "POST", srv.URL+tc.path, tc.body)
			if a.status != tc.status {
				t.Fatalf("status %d, want %d: %s", a.status, tc.status, a.body)
			}
			if tc.code == "" {
				var out struct {
					Data       []string
					Replica    string
					DurationMS *int64 `json:"duration_ms"`
				}
				if err := json.Unmarshal([]byte(a.body), &out); err != nil || len(out.Data) != 1 || out.Data[0] != "ABC" || out.Replica != "r1" || out.DurationMS == nil {
					t.Fatalf("body %s (%v)", a.body, err)
				}
				return
			}
			if got := errorCode(t, a.body); got != tc.code {
				t.Fatalf("code %q, want %q: %s", got, tc.code, a.body)
			}
			if tc.retryAfter && a.header.Get("Retry-After") == "" {
				t.Fatal("no Retry-After")
			}
		})
	}
	t.Run("app error title", func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/v1/predict/fail", `{"data":[]}`)
		if !strings.Contains(a.body, `"title":"Oops"`) || !strings.Contains(a.body, `"message":"boom"`) {
			t.Fatal(a.body)
		}
	})
	t.Run("bad timeout header", func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["a"]}`, gateway.TimeoutHeader, "soon")
		if a.status != 400 {
			t.Fatal(a.status, a.body)
		}
	})
	t.Run("caller deadline", func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/v1/predict/slow", `{"data":[]}`, gateway.TimeoutHeader, "50ms")
		<-f.started
		if a.status != 504 || errorCode(t, a.body) != "deadline_exceeded" {
			t.Fatal(a.status, a.body)
		}
	})
	t.Run("wrong method", func(t *testing.T) {
		a := do(t, "GET", srv.URL+"/v1/predict/upper", "")
		if a.status != 405 || errorCode(t, a.body) != "method_not_allowed" || a.header.Get("Allow") != "POST" {
			t.Fatal(a.status, a.header, a.body)
		}
	})
	t.Run("unknown route", func(t *testing.T) {
		a := do(t, "GET", srv.URL+"/nope", "")
		if a.status != 404 || errorCode(t, a.body) != "not_found" {
			t.Fatal(a.status, a.body)
		}
	})
}

func TestAuth(t *testing.T) {
	f := newFake()
	_, srv, _ := newGateway(t, f, func(c *gateway.Config) {
		c.Secrets.APIKeys = []string{"key-one", "key-two"}
		c.Secrets.AdminToken = "admin-secret"
	})
	for _, tc := range []struct {
		name, method, path, auth string
		status                   int
	}{
		{"api no key", "POST", "/v1/predict/upper", "", 401},
		{"api bad key", "POST", "/v1/predict/upper", "Bearer nope", 403},
		{"api admin token is not a key", "POST", "/v1/predict/upper", "Bearer admin-secret", 403},
		{"api key one", "POST", "/v1/predict/upper", "Bearer key-one", 200},
		{"api key two", "POST", "/v1/predict/upper", "bearer key-two", 200},
		{"rest no key", "POST", "/gradio_api/call/upper", "", 401},
		{"stats no token", "GET", "/api/admin/pool-stats", "", 401},
		{"stats api key", "GET", "/api/admin/pool-stats", "Bearer key-one", 403},
		{"stats token", "GET", "/api/admin/pool-stats", "Bearer admin-secret", 200},
		{"metrics no token", "GET", "/metrics", "", 401},
		{"metrics token", "GET", "/metrics", "Bearer admin-secret", 200},
		{"healthz open", "GET", "/healthz", "", 200},
		{"readyz open", "GET", "/readyz", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.auth != "" {
				hdr = []string{"Authorization", tc.auth}
			}
			a := do(t, tc.method, srv.URL+tc.path, `{"data":["a"]}`, hdr...)
			if a.status != tc.status {
				t.Fatalf("status %d, want %d: %s", a.status, tc.status, a.body)
			}
			if a.status == 401 && a.header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
}

func TestStatsHealthReady(t *testing.T) {
	f := newFake()
	_, srv, _ := newGateway(t, f, nil)
	a := do(t, "GET", srv.URL+"/api/admin/pool-stats", "")
	if a.status != 200 || !strings.Contains(a.body, `"initialized":true`) {
		t.Fatal(a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/healthz", ""); a.status != 200 {
		t.Fatal(a.status)
	}
	if a := do(t, "GET", srv.URL+"/readyz", ""); a.status != 200 {
		t.Fatal(a.status)
	}
	f.ready.Store(false)
	if a := do(t, "GET", srv.URL+"/readyz", ""); a.status != 503 {
		t.Fatal(a.status)
	}
}

// sseRecords reads "event: X\ndata: Y" records until EOF.
func sseRecords(t *testing.T, r io.Reader) (names []string, data []string, comments int) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			names = append(names, strings.TrimPrefix(line, "event: "))
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		case strings.HasPrefix(line, ":"):
			comments++
		}
	}
	return names, data, comments
}

func TestSubmitStream(t *testing.T) {
	f := newFake()
	_, srv, _ := newGateway(t, f, nil)
	resp, err := http.Post(srv.URL+"/v1/submit/count", "application/json", strings.NewReader(`{"data":[3]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatal(ct)
	}
	names, data, _ := sseRecords(t, resp.Body)
	want := "accepted queued started output output output complete"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if !strings.Contains(data[len(data)-1], `"data":[2]`) {
		t.Fatal(data)
	}

	t.Run("app error event", func(t *testing.T) {
		resp, err := http.Post(srv.URL+"/v1/submit/fail", "application/json", strings.NewReader(`{"data":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		names, data, _ := sseRecords(t, resp.Body)
		if names[len(names)-1] != "error" || !strings.Contains(data[len(data)-1], "app_error") {
			t.Fatal(names, data)
		}
	})
	t.Run("slow reader error event", func(t *testing.T) {
		resp, err := http.Post(srv.URL+"/v1/submit/slowreader", "application/json", strings.NewReader(`{"data":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		names, data, _ := sseRecords(t, resp.Body)
		if names[len(names)-1] != "error" || !strings.Contains(data[len(data)-1], `"code":"slow_reader"`) {
			t.Fatal(names, data)
		}
	})
	t.Run("refused before stream", func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/v1/submit/nope", `{"data":[]}`)
		if a.status != 404 {
			t.Fatal(a.status, a.body)
		}
	})
	t.Run("keep-alive", func(t *testing.T) {
		resp, err := http.Post(srv.URL+"/v1/submit/slow", "application/json", strings.NewReader(`{"data":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		<-f.started
		// Read until the first keep-alive comment, then let the call end.
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() && sc.Text() != ": keep-alive" {
		}
		f.release <- struct{}{}
		names, _, _ := sseRecords(t, resp.Body)
		if len(names) == 0 || names[len(names)-1] != "complete" {
			t.Fatal(names)
		}
	})
}

func TestSubmitDisconnectCancels(t *testing.T) {
	f := newFake()
	_, srv, _ := newGateway(t, f, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/submit/slow", strings.NewReader(`{"data":[]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-f.started
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for f.canceled.Load() == 0 || f.inUse.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call was not cancelled after the caller left")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestGradioRESTCall(t *testing.T) {
	f := newFake()
	_, srv, _ := newGateway(t, f, nil)
	a := do(t, "POST", srv.URL+"/gradio_api/call/count", `{"data":[2]}`)
	if a.status != 200 {
		t.Fatal(a.status, a.body)
	}
	var ev struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal([]byte(a.body), &ev); err != nil || ev.EventID == "" {
		t.Fatal(a.body)
	}
	resp, err := http.Get(srv.URL + "/gradio_api/call/count/" + ev.EventID)
	if err != nil {
		t.Fatal(err)
	}
	names, data, _ := sseRecords(t, resp.Body)
	resp.Body.Close()
	if got := strings.Join(names, " "); got != "generating generating complete" {
		t.Fatalf("events %q %q", got, data)
	}
	if data[len(data)-1] != "[1]" {
		t.Fatal(data)
	}
	// Read to its end, a result is freed (issue 20 item 3): not readable again.
	if a := do(t, "GET", srv.URL+"/gradio_api/call/count/"+ev.EventID, ""); !strings.Contains(a.body, `"404: Not Found"`) {
		t.Fatalf("a result read to its end is readable again: %s", a.body)
	}
	t.Run("unknown id", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/gradio_api/call/count/nope")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		names, data, _ := sseRecords(t, resp.Body)
		if len(names) != 1 || names[0] != "error" || data[0] != `"404: Not Found"` {
			t.Fatal(names, data)
		}
	})
	t.Run("app error", func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/gradio_api/call/fail", `{"data":[]}`)
		json.Unmarshal([]byte(a.body), &ev)
		resp, err := http.Get(srv.URL + "/gradio_api/call/fail/" + ev.EventID)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		names, data, _ := sseRecords(t, resp.Body)
		if len(names) != 1 || names[0] != "error" || !strings.Contains(data[0], `"error":"boom"`) {
			t.Fatal(names, data)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		_, srv, _ := newGateway(t, f, func(c *gateway.Config) { c.MaxPendingCalls = 1 })
		if a := do(t, "POST", srv.URL+"/gradio_api/call/upper", `{"data":["a"]}`); a.status != 200 {
			t.Fatal(a.status, a.body)
		}
		a := do(t, "POST", srv.URL+"/gradio_api/call/upper", `{"data":["a"]}`)
		if a.status != 503 || a.header.Get("Retry-After") == "" {
			t.Fatal(a.status, a.body)
		}
	})
}

func TestMetrics(t *testing.T) {
	f := newFake()
	g, srv, _ := newGateway(t, f, nil)
	do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["a"]}`)
	do(t, "POST", srv.URL+"/v1/predict/fail", `{"data":[]}`)
	reg := g.Metrics().Registry()
	for _, tc := range []struct{ name, want string }{
		{"gradiopool_sessions", `
# HELP gradiopool_sessions Pooled sessions by replica and state (idle, in_use, connecting).
# TYPE gradiopool_sessions gauge
gradiopool_sessions{replica="r1",state="connecting"} 0
gradiopool_sessions{replica="r1",state="idle"} 4
gradiopool_sessions{replica="r1",state="in_use"} 0
`},
		{"gradiopool_queue_timeouts_total", `
# HELP gradiopool_queue_timeouts_total Callers that gave up waiting for a session (queue_timeout), by replica.
# TYPE gradiopool_queue_timeouts_total counter
gradiopool_queue_timeouts_total{replica="r1"} 2
`},
		// The app's error (gr.Error) is counted apart from the calls the
		// gateway or a replica failed (issue 22).
		{"gradiopool_app_errors_total", `
# HELP gradiopool_app_errors_total Calls the app answered with an error (gr.Error, an exception in the function): the replica worked. By door, replica and endpoint.
# TYPE gradiopool_app_errors_total counter
gradiopool_app_errors_total{endpoint="other",replica="none",route="v1"} 1
`},
		{"gradiopool_calls_total", `
# HELP gradiopool_calls_total Ended calls by door (route: v1, call, frontdoor), replica (none: failed before any) and result (ok, app_error, error).
# TYPE gradiopool_calls_total counter
gradiopool_calls_total{replica="none",result="app_error",route="v1"} 1
gradiopool_calls_total{replica="r1",result="ok",route="v1"} 1
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tc.want), tc.name); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("gradiopool_build_info", func(t *testing.T) {
		want := fmt.Sprintf(`
# HELP gradiopool_build_info Always 1; the labels say which build of gradiopool is running.
# TYPE gradiopool_build_info gauge
gradiopool_build_info{goversion=%q,revision="",version=%q} 1
`, runtime.Version(), version.Get().Version) // v0.9.0+devel in a test binary: what `gradiopool version` prints
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gradiopool_build_info"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("http by route pattern", func(t *testing.T) {
		n, err := testutil.GatherAndCount(reg, "gradiopool_http_requests_total")
		if err != nil || n != 2 {
			t.Fatalf("%d series (%v), want 2 (upper and fail share a route)", n, err)
		}
		if a := do(t, "GET", srv.URL+"/metrics", ""); !strings.Contains(a.body, `route="/v1/predict/{api_name}"`) || !strings.Contains(a.body, "gradiopool_session_use_seconds_bucket") {
			t.Fatal(a.body)
		}
	})
}

func TestServeDrain(t *testing.T) {
	f := newFake()
	g := gateway.New(gateway.Config{DrainTimeout: 5 * time.Second}, f, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	got := make(chan answer, 1)
	go func() { got <- do(t, "POST", url+"/v1/predict/slow", `{"data":[]}`) }()
	<-f.started
	stop()
	// While draining, the call in flight finishes normally.
	time.Sleep(50 * time.Millisecond)
	close(f.release)
	if a := <-got; a.status != 200 || !strings.Contains(a.body, "done") {
		t.Fatal(a.status, a.body)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

func TestServeDrainTimeoutCancels(t *testing.T) {
	f := newFake()
	g := gateway.New(gateway.Config{DrainTimeout: 50 * time.Millisecond}, f, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	got := make(chan error, 1)
	go func() {
		resp, err := http.Post(url+"/v1/predict/slow", "application/json", strings.NewReader(`{"data":[]}`))
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	<-f.started
	stop()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	<-got
	if f.canceled.Load() != 1 {
		t.Fatal("the call in flight was not cancelled after the drain timeout")
	}
}

func TestLogsHideSecretsAndEmails(t *testing.T) {
	f := newFake()
	const email, key, admin = "Bob.Secret@Example.com", "key-abcdef-123", "admin-zyx-987"
	_, srv, logs := newGateway(t, f, func(c *gateway.Config) {
		c.Secrets = gateway.Secrets{HFToken: "hf_never_seen", APIKeys: []string{key}, AdminToken: admin, HashKey: "hk"}
	})
	var bodies strings.Builder
	for _, r := range []struct{ method, path, body, auth string }{
		{"POST", "/v1/predict/upper", `{"data":["x"]}`, key},
		{"POST", "/v1/predict/fail", `{"data":[]}`, key},
		{"POST", "/v1/submit/count", `{"data":[2]}`, key},
		{"POST", "/v1/predict/upper", `{"data":["x"]}`, "wrong"},
		{"GET", "/api/admin/pool-stats", "", admin},
		{"GET", "/metrics", "", admin},
	} {
		a := do(t, r.method, srv.URL+r.path, r.body, "Authorization", "Bearer "+r.auth, gateway.UserHeader, email)
		bodies.WriteString(a.body)
	}
	all := strings.ToLower(logs.String() + bodies.String())
	for _, s := range []string{email, key, admin, "hf_never_seen"} {
		if strings.Contains(all, strings.ToLower(s)) {
			t.Errorf("%q leaked", s)
		}
	}
	if !strings.Contains(logs.String(), (&fake{}).UserTag(email)) {
		t.Errorf("the access log lacks the user hash %s", (&fake{}).UserTag(email))
	}
	if n := strings.Count(logs.String(), `"msg":"http request"`); n != 6 {
		t.Errorf("%d access lines, want 6", n)
	}
}

func TestGradioRESTPaths(t *testing.T) {
	f := newFake()
	_, srv, _ := newGateway(t, f, nil)
	for _, prefix := range []string{"/gradio_api", ""} {
		for _, slash := range []string{"", "/"} {
			t.Run(prefix+slash, func(t *testing.T) {
				a := do(t, "POST", srv.URL+prefix+"/call/upper"+slash, `{"data":["a"]}`)
				var ev struct {
					EventID string `json:"event_id"`
				}
				if a.status != 200 || json.Unmarshal([]byte(a.body), &ev) != nil {
					t.Fatal(a.status, a.body)
				}
				a = do(t, "GET", srv.URL+prefix+"/call/upper/"+ev.EventID, "")
				if !strings.Contains(a.body, "event: complete\ndata: [\"A\"]") {
					t.Fatal(a.body)
				}
			})
		}
	}
}

// TestServeDrainWaitsForRESTCalls: a /gradio_api/call job outlives its
// POST, and a drain waits for it too.
func TestServeDrainWaitsForRESTCalls(t *testing.T) {
	f := newFake()
	g := gateway.New(gateway.Config{DrainTimeout: 10 * time.Second}, f, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	a := do(t, "POST", "http://"+ln.Addr().String()+"/gradio_api/call/slow", `{"data":[]}`)
	if a.status != 200 {
		t.Fatal(a.status, a.body)
	}
	<-f.started
	http.DefaultClient.CloseIdleConnections()
	stop()
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) while a call was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(f.release)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if f.canceled.Load() != 0 {
		t.Fatal("the call was cancelled instead of finishing")
	}
}

func TestPendingCallsExpire(t *testing.T) {
	f := newFake()
	g, srv, _ := newGateway(t, f, func(c *gateway.Config) {
		c.MaxPendingCalls, c.PendingCallTTL = 1, time.Minute
	})
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	post := func() answer { return do(t, "POST", srv.URL+"/gradio_api/call/upper", `{"data":["a"]}`) }
	a := post()
	var ev struct {
		EventID string `json:"event_id"`
	}
	if a.status != 200 || json.Unmarshal([]byte(a.body), &ev) != nil {
		t.Fatal(a.status, a.body)
	}
	// Unread, it is kept for the TTL after it ended (read, it would be
	// freed at once).
	fdtest.WaitFor(t, "the call to end", func() bool { return g.PendingFinished() == 1 })
	if a := post(); a.status != 503 {
		t.Fatalf("full map: %d %s", a.status, a.body)
	}
	advance(59 * time.Second)
	if a := post(); a.status != 503 {
		t.Fatalf("expired before its TTL: %d %s", a.status, a.body)
	}
	advance(2 * time.Second)
	if a := post(); a.status != 200 {
		t.Fatalf("after the TTL: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/gradio_api/call/upper/"+ev.EventID, ""); !strings.Contains(a.body, `"404: Not Found"`) {
		t.Fatal("an expired call is still readable:", a.body)
	}
}

func TestRequestID(t *testing.T) {
	_, srv, logs := newGateway(t, newFake(), nil)
	for _, tc := range []struct{ name, in string }{{"caller's", "next-js-123"}, {"invalid replaced", "bad id with spaces"}, {"none", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, "GET", srv.URL+"/healthz", "", "X-Request-Id", tc.in)
			got := a.header.Get("X-Request-Id")
			if got == "" || (tc.name == "caller's") != (got == tc.in) {
				t.Fatalf("X-Request-Id %q for %q", got, tc.in)
			}
			if !strings.Contains(logs.String(), `"request_id":"`+got+`"`) {
				t.Fatal("the access line lacks the request id")
			}
		})
	}
}

// FuzzCallBody: whatever the body, the gateway answers JSON with a 2xx or
// 4xx status, never a panic or a 5xx.
func FuzzCallBody(f *testing.F) {
	for _, s := range []string{`{"data":["a"]}`, `{"data":[`, `{}`, `null`, `[]`, `{"data":null}`, `{"data":[1,2,3]}`, `{"data":"x"}`, "\x00", `{"data":["a"]} x`} {
		f.Add(s)
	}
	g := gateway.New(gateway.Config{MaxBodyBytes: 256}, newFake(), nil, nil)
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/predict/upper", strings.NewReader(body)))
		if rec.Code >= 500 || !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%q -> %d %s", body, rec.Code, rec.Body.String())
		}
	})
}

// BenchmarkGatewayPredict is the gateway's own cost per call: HTTP, JSON,
// auth, metrics and the access log, over a backend that answers at once.
func BenchmarkGatewayPredict(b *testing.B) {
	g := gateway.New(gateway.Config{Secrets: gateway.Secrets{APIKeys: []string{"k"}}}, newFake(), nil, nil)
	srv := httptest.NewServer(g)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/predict/upper", strings.NewReader(`{"data":["hello"]}`))
			req.Header.Set("Authorization", "Bearer k")
			req.Header.Set(gateway.UserHeader, "bench@example.com")
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
