// Package api_test checks api/openapi.yaml, the gateway's published
// contract, against the running gateway: every answer below, good or bad,
// is validated by kin-openapi (a maintained OpenAPI 3.0/3.1 implementation;
// hand-written checks would test this file against itself), and every
// error code the gateway's source can answer must be in the contract.
package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

const (
	apiKey     = "contract-api-key"
	adminToken = "contract-admin-token"
)

func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile("openapi.yaml")
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi: %q, want 3.1.0", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// contractGateway is the gateway over a real pool of one simulated replica,
// with API keys and an admin token, one session and a short queue time-out
// so that queue_timeout can be provoked.
// contractGateway serves a gateway over one simulated replica; it
// returns the server and the replica's name.
func contractGateway(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	sim := gradiotest.NewServer(gradiotest.DefaultApp())
	t.Cleanup(sim.Close)
	cfg := gateway.Config{
		Pool:         pool.Config{Replicas: []string{sim.URL}, MinConnections: 1, MaxConnections: 1, QueueTimeout: 300 * time.Millisecond},
		MaxBodyBytes: 4096,
		Secrets:      gateway.Secrets{APIKeys: []string{apiKey}, AdminToken: adminToken},
	}
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(nil, metrics))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	g := gateway.New(cfg, b, nil, metrics)
	g.SetConfigLoader(func() (gateway.Config, error) { return cfg, nil })
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv, p.Replicas()[0]
}

type exchange struct {
	name, method, path, body string
	header                   map[string]string
	status                   int
	code                     string // the error code expected, if any
}

func TestContract(t *testing.T) {
	doc := loadSpec(t)
	srv, replica := contractGateway(t)
	doc.Servers = openapi3.Servers{{URL: srv.URL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	// Streams and pages are checked for their media type and status; their
	// bodies are not JSON.
	openapi3filter.RegisterBodyDecoder("text/event-stream", stringDecoder)
	openapi3filter.RegisterBodyDecoder("text/html", stringDecoder)

	key := map[string]string{"Authorization": "Bearer " + apiKey}
	with := func(h map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range h {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	admin := map[string]string{"Authorization": "Bearer " + adminToken}
	var eventID string
	exchanges := []exchange{
		{"predict", "POST", "/v1/predict/upper", `{"data":["hi"]}`, with(key, "X-Gradiopool-User", "alice@example.com"), 200, ""},
		{"predict kwargs", "POST", "/v1/predict/upper", `{"data":{"text":"hi"}}`, key, 200, ""},
		{"submit", "POST", "/v1/submit/count", `{"data":[2]}`, key, 200, ""},
		{"call post", "POST", "/gradio_api/call/upper", `{"data":["rest"]}`, key, 200, ""},
		{"call get", "GET", "/gradio_api/call/upper/{event}", "", key, 200, ""},
		{"call get unknown id", "GET", "/gradio_api/call/upper/nope", "", key, 200, ""},
		{"healthz", "GET", "/healthz", "", nil, 200, ""},
		{"readyz", "GET", "/readyz", "", nil, 200, ""},
		{"pool-stats", "GET", "/api/admin/pool-stats", "", admin, 200, ""},
		{"history", "GET", "/api/admin/history", "", admin, 200, ""},
		{"history since start", "GET", "/api/admin/history?window=life", "", admin, 200, ""},
		{"reload", "POST", "/api/admin/reload", "", admin, 200, ""},
		{"reload without the admin token", "POST", "/api/admin/reload", "", nil, 401, "unauthorized"},
		{"metrics", "GET", "/metrics", "", admin, 200, ""},
		{"drain", "POST", "/api/admin/replicas/{replica}/drain", "", admin, 200, ""},
		{"disable", "POST", "/api/admin/replicas/{replica}/disable", "", admin, 200, ""},
		{"enable", "POST", "/api/admin/replicas/{replica}/enable", "", admin, 200, ""},
		{"drain unknown replica", "POST", "/api/admin/replicas/nope/drain", "", admin, 404, "unknown_replica"},
		{"drain without the admin token", "POST", "/api/admin/replicas/{replica}/drain", "", nil, 401, "unauthorized"},
		{"dashboard", "GET", "/admin", "", admin, 200, ""},
		{"dashboard login form", "GET", "/admin", "", nil, 401, ""},

		{"no key", "POST", "/v1/predict/upper", `{"data":["a"]}`, nil, 401, "unauthorized"},
		{"wrong key", "POST", "/v1/predict/upper", `{"data":["a"]}`, map[string]string{"Authorization": "Bearer nope"}, 403, "forbidden"},
		{"no admin token", "GET", "/api/admin/pool-stats", "", nil, 401, "unauthorized"},
		{"bad json", "POST", "/v1/predict/upper", `{"data":`, key, 400, "bad_json"},
		{"data scalar", "POST", "/v1/predict/upper", `{"data":"a"}`, key, 400, "bad_json"},
		{"bad user", "POST", "/v1/predict/upper", `{"data":["a"]}`, with(key, "X-Gradiopool-User", "a b@example.com"), 400, "bad_user"},
		{"bad arguments", "POST", "/v1/predict/upper", `{"data":["a","b","c"]}`, key, 400, "bad_arguments"},
		{"bad kwargs", "POST", "/v1/predict/upper", `{"data":{"nope":1}}`, key, 400, "bad_arguments"},
		{"bad timeout", "POST", "/v1/predict/upper", `{"data":["a"]}`, with(key, "X-Gradiopool-Timeout", "soon"), 400, "bad_timeout"},
		{"bad priority", "POST", "/v1/predict/upper", `{"data":["a"]}`, with(key, "X-Gradiopool-Priority", "urgent"), 400, "bad_priority"},
		{"bad scope", "GET", "/api/admin/pool-stats?scope=galaxy", "", admin, 400, "bad_scope"},
		{"bad since", "GET", "/api/admin/history?since=yesterday", "", admin, 400, "bad_since"},
		{"bad window", "GET", "/api/admin/history?window=week", "", admin, 400, "bad_window"},
		{"unknown endpoint", "POST", "/v1/predict/nope", `{"data":[]}`, key, 404, "unknown_endpoint"},
		{"wrong method", "GET", "/v1/predict/upper", "", key, 405, "method_not_allowed"},
		{"no such route", "GET", "/nope", "", key, 404, "not_found"},
		{"body too large", "POST", "/v1/predict/upper", `{"data":["` + strings.Repeat("x", 5000) + `"]}`, key, 413, "body_too_large"},
		{"app error", "POST", "/v1/predict/fail", `{"data":["x"]}`, key, 422, "app_error"},
		{"deadline", "POST", "/v1/predict/slow", `{"data":[5]}`, with(key, "X-Gradiopool-Timeout", "200ms"), 504, "deadline_exceeded"},
	}
	client := srv.Client()
	for _, ex := range exchanges {
		t.Run(ex.name, func(t *testing.T) {
			path := strings.Replace(ex.path, "{event}", eventID, 1)
			path = strings.Replace(path, "{replica}", url.PathEscape(replica), 1)
			status, body := validate(t, client, doc, router, srv.URL, ex.method, path, ex.body, ex.header)
			if status != ex.status {
				t.Fatalf("%s %s: status %d, want %d: %s", ex.method, path, status, ex.status, body)
			}
			if ex.code != "" && !bytes.Contains(body, []byte(`"code":"`+ex.code+`"`)) {
				t.Fatalf("%s %s: %s, want code %s", ex.method, path, body, ex.code)
			}
			if ex.name == "call post" {
				eventID = string(regexp.MustCompile(`"event_id":"([^"]+)"`).FindSubmatch(body)[1])
			}
		})
	}

	// queue_timeout: the one session is held by a slow call, so the next
	// caller waits out the queue time-out (300 ms) and gets 503.
	t.Run("queue timeout", func(t *testing.T) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequest("POST", srv.URL+"/v1/predict/slow", strings.NewReader(`{"data":[2]}`))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		defer func() { <-done }()
		// Bounded: the slow call takes 2 s; the session is taken within
		// the first tries.
		for i := 0; i < 40; i++ {
			status, body := validate(t, client, doc, router, srv.URL, "POST", "/v1/predict/upper", `{"data":["a"]}`, key)
			if status == 503 {
				if !bytes.Contains(body, []byte(`"code":"queue_timeout"`)) {
					t.Fatalf("503 %s, want queue_timeout", body)
				}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("no call waited out the queue time-out while the only session was held")
	})
}

// validate sends one request and validates the answer against the
// contract; it returns the status and the body.
func validate(t *testing.T, client *http.Client, spec *openapi3.T, router routers.Router, base, method, path, body string, header map[string]string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		// Not a route of the contract: the answer must still be its Error
		// object, 404 or 405 (the contract's description says so).
		if resp.StatusCode != 404 && resp.StatusCode != 405 {
			t.Fatalf("%s %s is not in the contract (%v) but answered %d", method, path, err, resp.StatusCode)
		}
		var v any
		if jerr := json.Unmarshal(got, &v); jerr != nil {
			t.Fatalf("%s %s answered %d, not JSON: %s", method, path, resp.StatusCode, clip(got))
		}
		if verr := spec.Components.Schemas["Error"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); verr != nil {
			t.Fatalf("%s %s answered %d %s, not the contract's Error: %v", method, path, resp.StatusCode, clip(got), verr)
		}
		return resp.StatusCode, got
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status:  resp.StatusCode,
		Header:  resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(got)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Fatalf("%s %s answered %d %s, which the contract does not allow: %v", method, path, resp.StatusCode, clip(got), err)
	}
	return resp.StatusCode, got
}

func stringDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	b, err := io.ReadAll(body)
	return string(b), err
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// TestEveryErrorCodeDocumented reads the gateway's source for the codes it
// can answer and wants each in the contract's ErrorCode enum, and no code in
// the enum that the source no longer has.
func TestEveryErrorCodeDocumented(t *testing.T) {
	doc := loadSpec(t)
	var documented []string
	for _, v := range doc.Components.Schemas["ErrorCode"].Value.Enum {
		documented = append(documented, v.(string))
	}
	files, err := filepath.Glob("../gateway/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no gateway sources: %v", err)
	}
	// The /gradio_api/call routes (gateway/restcall) answer in the gateway's
	// error shape too (its other routes answer Gradio's {"detail": ...}).
	files = append(files, "../gateway/restcall/calls.go")
	// A code is written in place (Code: "x", badRequest("x", ...)) or
	// named once as a constant (const codeAppError = "app_error",
	// const CodeResultTooLarge = "result_too_large").
	// or written raw into an answer ({"error":{"code":"x",...}}).
	re := regexp.MustCompile(`(?:Code:\s*|badRequest\(|\b[cC]ode[A-Z]\w*\s*=\s*|"code":)"([a-z_]+)"`)
	found := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			found[string(m[1])] = true
		}
	}
	if len(found) < 20 {
		t.Fatalf("found only %d codes in the source: the pattern is stale: %v", len(found), found)
	}
	var missing, stale []string
	for c := range found {
		if !slices.Contains(documented, c) {
			missing = append(missing, c)
		}
	}
	for _, c := range documented {
		if !found[c] {
			stale = append(stale, c)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	if len(missing) > 0 {
		t.Errorf("codes the gateway answers but api/openapi.yaml does not list: %v", missing)
	}
	if len(stale) > 0 {
		t.Errorf("codes api/openapi.yaml lists but the gateway no longer answers: %v", stale)
	}
}
