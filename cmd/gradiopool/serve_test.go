package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/redistest"
)

// The secrets and the e-mail of the end-to-end session; no log line,
// answer or stats body may contain them.
const (
	e2eHFToken    = "hf_e2eSecretTokenValue123"
	e2eAPIKey     = "e2e-api-key-5f1c9a"
	e2eAdminToken = "e2e-admin-token-77d0"
	e2eEmail      = "Alice.E2E@Example.com"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// gradiopoolBinary builds the real command once per test run.
func gradiopoolBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gradiopool-e2e")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "gradiopool")
		out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return builtBin
}

// lineBuffer collects a process's output, safe for concurrent use.
type lineBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lineBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lineBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// gateway is a running `gradiopool serve`.
type e2eGateway struct {
	cmd    *exec.Cmd
	url    string
	stderr *lineBuffer
	waited chan error
}

func startServe(t *testing.T, env []string, args ...string) *e2eGateway {
	t.Helper()
	cmd := exec.Command(gradiopoolBinary(t), append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	g := &e2eGateway{cmd: cmd, stderr: &lineBuffer{}, waited: make(chan error, 1)}
	cmd.Stderr = g.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.waited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-g.waited
	})
	deadline := time.Now().Add(20 * time.Second)
	for g.url == "" {
		for _, line := range strings.Split(g.stderr.String(), "\n") {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "gateway listening" {
				g.url = "http://" + rec.Addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start: %s", g.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return g
}

type e2eAnswer struct {
	status int
	header http.Header
	body   string
}

// e2eDo sends one request; bodies are kept for the leak check.
func e2eDo(t *testing.T, seen *lineBuffer, method, url, body string, hdr ...string) e2eAnswer {
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
	seen.Write(b)
	for k, v := range resp.Header {
		seen.Write([]byte(k + ": " + strings.Join(v, ",") + "\n"))
	}
	return e2eAnswer{resp.StatusCode, resp.Header, string(b)}
}

func e2eWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startSims(t *testing.T, n int) ([]*gradiotest.Server, string) {
	t.Helper()
	var sims []*gradiotest.Server
	var urls []string
	for range n {
		s := gradiotest.NewUnstartedServer(nil)
		s.DefaultConcurrencyLimit = -1
		s.StepDelay = time.Millisecond
		s.Start()
		t.Cleanup(s.Close)
		sims = append(sims, s)
		urls = append(urls, s.URL)
	}
	return sims, strings.Join(urls, ",")
}

// TestServeEndToEnd runs the real binary against simulated replicas in
// this process and exercises every endpoint, then drains it with SIGTERM
// while a call is in flight.
func TestServeEndToEnd(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { // registered first: runs after every other cleanup
		http.DefaultClient.CloseIdleConnections()
		goleak.VerifyNone(t, ignore)
	})
	sims, replicas := startSims(t, 2)
	g := startServe(t, []string{
		"GRADIOPOOL_REPLICAS=" + replicas,
		"GRADIOPOOL_POOL_MIN_CONNECTIONS=1",
		"GRADIOPOOL_MAX_BODY_BYTES=4096",
		"GRADIOPOOL_LOG_FORMAT=json",
		"GRADIOPOOL_LOG_LEVEL=debug",
		"GRADIOPOOL_DRAIN_TIMEOUT=30s",
		"GRADIOPOOL_POOL_HEALTH_CHECK_INTERVAL=200ms",
		"HF_TOKEN=" + e2eHFToken,
		"GRADIOPOOL_API_KEYS=other-key," + e2eAPIKey,
		"GRADIOPOOL_ADMIN_TOKEN=" + e2eAdminToken,
		"GRADIOPOOL_HASH_KEY=e2e-hash-key",
	}, "--listen", "127.0.0.1:0")
	seen := &lineBuffer{}
	key := []string{"Authorization", "Bearer " + e2eAPIKey, "X-Gradiopool-User", e2eEmail}
	admin := []string{"Authorization", "Bearer " + e2eAdminToken}

	t.Run("healthz", func(t *testing.T) {
		if a := e2eDo(t, seen, "GET", g.url+"/healthz", ""); a.status != 200 {
			t.Fatal(a.status, a.body)
		}
	})
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		contains                 string
	}{
		{"predict", "POST", "/v1/predict/upper", `{"data":["hello"]}`, key, 200, `"data":["HELLO"]`},
		{"no api key", "POST", "/v1/predict/upper", `{"data":["hello"]}`, nil, 401, `"code":"unauthorized"`},
		{"wrong api key", "POST", "/v1/predict/upper", `{"data":["hello"]}`, []string{"Authorization", "Bearer nope"}, 403, `"code":"forbidden"`},
		{"malformed json", "POST", "/v1/predict/upper", `{"data":`, key, 400, `"code":"bad_json"`},
		{"wrong arity", "POST", "/v1/predict/upper", `{"data":["a","b","c"]}`, key, 400, `"code":"bad_arguments"`},
		{"unknown endpoint", "POST", "/v1/predict/nope", `{"data":[]}`, key, 404, `"code":"unknown_endpoint"`},
		{"oversized body", "POST", "/v1/predict/upper", `{"data":["` + strings.Repeat("x", 5000) + `"]}`, key, 413, `"code":"body_too_large"`},
		{"app error", "POST", "/v1/predict/fail", `{"data":["x"]}`, key, 422, `"code":"app_error"`},
		{"stats without token", "GET", "/api/admin/pool-stats", "", key, 403, `"code":"forbidden"`},
		{"stats", "GET", "/api/admin/pool-stats", "", admin, 200, `"userAssignments":1`},
		{"metrics without token", "GET", "/metrics", "", nil, 401, `"code":"unauthorized"`},
		{"metrics", "GET", "/metrics", "", admin, 200, `gradiopool_sessions{replica=`},
		{"readyz", "GET", "/readyz", "", nil, 200, `"ready":true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e2eDo(t, seen, tc.method, g.url+tc.path, tc.body, tc.hdr...)
			if a.status != tc.status || !strings.Contains(a.body, tc.contains) {
				t.Fatalf("%d %s", a.status, a.body)
			}
		})
	}
	t.Run("submit stream", func(t *testing.T) {
		a := e2eDo(t, seen, "POST", g.url+"/v1/submit/count", `{"data":[3]}`, key...)
		if a.status != 200 || a.header.Get("Content-Type") != "text/event-stream" ||
			!strings.Contains(a.body, "event: output") || !strings.Contains(a.body, "event: complete") {
			t.Fatalf("%d %s", a.status, a.body)
		}
	})
	t.Run("gradio rest call", func(t *testing.T) {
		a := e2eDo(t, seen, "POST", g.url+"/gradio_api/call/upper", `{"data":["rest"]}`, key...)
		var ev struct {
			EventID string `json:"event_id"`
		}
		if a.status != 200 || json.Unmarshal([]byte(a.body), &ev) != nil || ev.EventID == "" {
			t.Fatalf("%d %s", a.status, a.body)
		}
		a = e2eDo(t, seen, "GET", g.url+"/gradio_api/call/upper/"+ev.EventID, "", key...)
		if !strings.Contains(a.body, "event: complete\ndata: [\"REST\"]") {
			t.Fatalf("%d %s", a.status, a.body)
		}
	})
	t.Run("caller disconnect cancels the job", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/predict/slow", strings.NewReader(`{"data":[120]}`))
		req.Header.Set("Authorization", "Bearer "+e2eAPIKey)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		running := func() int { return sims[0].Snapshot().Running + sims[1].Snapshot().Running }
		e2eWait(t, "the slow call to run", func() bool { return running() == 1 })
		cancel()
		<-done
		e2eWait(t, "the app's job to be cancelled", func() bool { return running() == 0 })
		e2eWait(t, "the session to be idle again", func() bool {
			a := e2eDo(t, seen, "GET", g.url+"/api/admin/pool-stats", "", admin...)
			var st struct {
				InUse     *int `json:"inUseConnections"`
				Available int  `json:"availableConnections"`
			}
			return json.Unmarshal([]byte(a.body), &st) == nil && st.InUse != nil && *st.InUse == 0 && st.Available > 0
		})
	})

	t.Run("seed logging list", func(t *testing.T) {
		// The logged events: initialisation, session creation, user
		// assignment, health checks, errors; plus one access line per request.
		for _, msg := range []string{"pool: initialized", "pool: connected", "pool: session_created", "pool: assigned", "pool: health_check", "pool: call_done", "http request"} {
			e2eWait(t, "a "+msg+" log line", func() bool { return strings.Contains(g.stderr.String(), `"msg":"`+msg+`"`) })
		}
	})
	t.Run("no secret or e-mail leaks", func(t *testing.T) {
		all := g.stderr.String() + seen.String()
		for _, s := range []string{e2eHFToken, e2eAPIKey, e2eAdminToken, strings.ToLower(e2eEmail), "e2e-hash-key"} {
			if strings.Contains(strings.ToLower(all), strings.ToLower(s)) {
				t.Errorf("%q appears in a log line or an answer", s)
			}
		}
		if !strings.Contains(g.stderr.String(), `"msg":"http request"`) || !strings.Contains(g.stderr.String(), `"user":"`) {
			t.Error("the access log has no user hash")
		}
	})

	t.Run("drain on SIGTERM", func(t *testing.T) {
		for _, s := range sims {
			s.UpdateKnobs(func(k *gradiotest.Knobs) { k.Latency = 500 * time.Millisecond })
		}
		got := make(chan e2eAnswer, 1)
		go func() {
			req, _ := http.NewRequest("POST", g.url+"/v1/predict/upper", strings.NewReader(`{"data":["drain"]}`))
			req.Header.Set("Authorization", "Bearer "+e2eAPIKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				got <- e2eAnswer{body: err.Error()}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			got <- e2eAnswer{status: resp.StatusCode, body: string(b)}
		}()
		running := func() int { return sims[0].Snapshot().Running + sims[1].Snapshot().Running }
		e2eWait(t, "the call to run", func() bool { return running() == 1 })
		if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if a := <-got; a.status != 200 || !strings.Contains(a.body, "DRAIN") {
			t.Fatalf("the call in flight did not finish: %d %s", a.status, a.body)
		}
		select {
		case err := <-g.waited:
			g.waited <- err // for the cleanup
			if err != nil {
				t.Fatalf("exit: %v\n%s", err, g.stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not exit after SIGTERM")
		}
		if !strings.Contains(g.stderr.String(), `"msg":"drained"`) {
			t.Fatalf("no drained line: %s", g.stderr.String())
		}
	})
}

// TestServeConfigErrors checks that bad configuration exits non-zero with
// a message that names the problem.
func TestServeConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("replicas: [a/b]\npool:\n  max_conections: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"unknown key", []string{"--config", bad}, nil, `line 3: unknown key "max_conections"`},
		{"no replicas", nil, nil, "at least one replica"},
		{"bad duration flag", []string{"--replicas", "a/b", "--queue-timeout", "soon"}, nil, `invalid value "soon" for flag -queue-timeout`},
		{"min above max", nil, []string{"GRADIOPOOL_REPLICAS=a/b", "GRADIOPOOL_POOL_MIN_CONNECTIONS=9", "GRADIOPOOL_POOL_MAX_CONNECTIONS=2"}, "is above pool.max_connections"},
		{"redis without hash key", nil, []string{"GRADIOPOOL_REPLICAS=a/b", "GRADIOPOOL_REDIS_URL=redis://:redisPa55@127.0.0.1:1/0"}, "GRADIOPOOL_HASH_KEY is not"},
		{"redis unreachable", []string{"--listen", "127.0.0.1:0"}, []string{"GRADIOPOOL_REPLICAS=a/b", "GRADIOPOOL_HASH_KEY=k", "GRADIOPOOL_REDIS_URL=redis://:redisPa55@127.0.0.1:1/0"}, "redis at 127.0.0.1:1 does not answer"},
		{"redis bad url", []string{"--listen", "127.0.0.1:0"}, []string{"GRADIOPOOL_REPLICAS=a/b", "GRADIOPOOL_HASH_KEY=k", "GRADIOPOOL_REDIS_URL=mysql://redisPa55@x"}, "GRADIOPOOL_REDIS_URL is not a valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(gradiopoolBinary(t), append([]string{"serve"}, tc.args...)...)
			cmd.Env = append(cleanEnv(), tc.env...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("exit %v, want non-zero: %s", err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("output %q does not contain %q", out, tc.want)
			}
			if strings.Contains(string(out), "redisPa55") {
				t.Fatalf("the Redis password leaked: %s", out)
			}
		})
	}
}

// cleanEnv is the environment without any GRADIOPOOL_ variable.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GRADIOPOOL_") && !strings.HasPrefix(kv, "HF_TOKEN=") {
			env = append(env, kv)
		}
	}
	return env
}

// TestDemoQuick runs `gradiopool demo --quick` and checks it exits 0 with
// its summary.
func TestDemoQuick(t *testing.T) {
	cmd := exec.Command(gradiopoolBinary(t), "demo", "--quick")
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"Summary", "calls:", "first call of a user", "warm short call", "gr.State", "failovers:", `"pools"`, `"mugenAILP_stage"`, `"totalConnections"`} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	// The official JS client step: it must pass wherever it can run (Node
	// and testdata/jsclient/node_modules, as in make test), else say why
	// it was skipped.
	_, noNode := exec.LookPath("node")
	_, noModules := os.Stat(filepath.Join("..", "..", "testdata", "jsclient", "node_modules", "@gradio", "client", "package.json"))
	if noNode == nil && noModules == nil {
		if !strings.Contains(out, "gr.State across 3 calls of one client: kept") {
			t.Errorf("the official JS client step did not keep gr.State through the front door:\n%s", out)
		}
	} else if !strings.Contains(out, "official JS client (@gradio/client) through the front door: skipped: ") {
		t.Errorf("no line says why the official JS client step was skipped:\n%s", out)
	}
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	lines := 0
	for sc.Scan() {
		lines++
	}
	if lines == 0 {
		t.Error("no progress line on stderr")
	}
}

// TestServeSpaceIDs resolves Space ids through the Hub emulation given by
// GRADIOPOOL_HUB_URL, as with real Spaces.
func TestServeSpaceIDs(t *testing.T) {
	hub := gradiotest.NewHub()
	t.Cleanup(hub.Close)
	sims, _ := startSims(t, 2)
	hub.AddSpace("owner/app_one", sims[0])
	hub.AddSpace("owner/app_two", sims[1])
	g := startServe(t, []string{"GRADIOPOOL_LOG_FORMAT=json"},
		"--listen", "127.0.0.1:0", "--replicas", "owner/app_one,owner/app_two", "--hub-url", hub.URL, "--min-connections", "1")
	seen := &lineBuffer{}
	a := e2eDo(t, seen, "POST", g.url+"/v1/predict/upper", `{"data":["id"]}`, "X-Gradiopool-User", "carol@example.com")
	if a.status != 200 || !strings.Contains(a.body, `"replica":"app_`) {
		t.Fatalf("%d %s", a.status, a.body)
	}
	a = e2eDo(t, seen, "GET", g.url+"/api/admin/pool-stats", "")
	if !strings.Contains(a.body, `"app_one":{`) || !strings.Contains(a.body, `"app_two":{`) {
		t.Fatal(a.body)
	}
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-g.waited; err != nil {
		t.Fatalf("exit: %v", err)
	}
	g.waited <- nil
	http.DefaultClient.CloseIdleConnections()
}

// TestServeSharedRedis runs two gateway instances sharing a Redis (a real
// redis-server when installed, else miniredis) and the hash key: a user assigned by one instance
// is sent to the same replica by the other, which never saw them.
func TestServeSharedRedis(t *testing.T) {
	redisAddr := redistest.Start(t)
	_, replicas := startSims(t, 2)
	env := []string{"GRADIOPOOL_LOG_FORMAT=json", "GRADIOPOOL_REPLICAS=" + replicas, "GRADIOPOOL_POOL_MIN_CONNECTIONS=1",
		"GRADIOPOOL_HASH_KEY=shared-key", "GRADIOPOOL_REDIS_URL=redis://" + redisAddr + "/0"}
	a := startServe(t, env, "--listen", "127.0.0.1:0")
	b := startServe(t, env, "--listen", "127.0.0.1:0")
	seen := &lineBuffer{}
	replicaOf := func(g *e2eGateway, user string) string {
		t.Helper()
		ans := e2eDo(t, seen, "POST", g.url+"/v1/predict/upper", `{"data":["x"]}`, "X-Gradiopool-User", user)
		var out struct{ Replica string }
		if ans.status != 200 || json.Unmarshal([]byte(ans.body), &out) != nil {
			t.Fatalf("%d %s", ans.status, ans.body)
		}
		return out.Replica
	}
	users := []string{"u1@example.com", "u2@example.com", "u3@example.com", "u4@example.com"}
	want := map[string]string{}
	for _, u := range users {
		want[u] = replicaOf(a, u)
	}
	// In reverse order, so that instance b's own round robin would differ.
	for i := len(users) - 1; i >= 0; i-- {
		if got := replicaOf(b, users[i]); got != want[users[i]] {
			t.Errorf("%s: instance b chose %s, instance a %s", users[i], got, want[users[i]])
		}
	}
	http.DefaultClient.CloseIdleConnections()
}
