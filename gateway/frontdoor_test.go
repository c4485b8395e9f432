package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// The helpers of the gateway's tests that go through its Gradio front
// door (cluster, drain, reload, isolation, metrics...). The front door's
// own behaviour tests live beside it, in gateway/frontdoor (harness_test.go
// there builds a front door over a pool without the gateway).

// frontGateway is the gateway over a real pool of n simulated replicas
// with Gradio's default concurrency (one call at a time per endpoint, as
// the conformance suite expects), reached through its Gradio front door.
func frontGateway(t *testing.T, n int, mod func(*gateway.Config)) (*httptest.Server, *gateway.Gateway, []*gradiotest.Server, *pool.Pool) {
	t.Helper()
	var sims []*gradiotest.Server
	var urls []string
	for range n {
		s := gradiotest.NewUnstartedServer(nil)
		s.StepDelay = 5 * time.Millisecond
		s.Start()
		t.Cleanup(s.Close)
		sims = append(sims, s)
		urls = append(urls, s.URL)
	}
	srv, g, p := frontGatewayOver(t, urls, mod)
	return srv, g, sims, p
}

// frontGatewayOver is a gateway with its front door over a real pool of
// the replicas at urls, in that pool order (min 1, max 8 sessions each;
// mod changes the configuration first).
func frontGatewayOver(t *testing.T, urls []string, mod func(*gateway.Config)) (*httptest.Server, *gateway.Gateway, *pool.Pool) {
	t.Helper()
	cfg := gateway.Config{Pool: pool.Config{Replicas: urls, MinConnections: 1, MaxConnections: 8}}
	if mod != nil {
		mod(&cfg)
	}
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(nil, metrics))
	if err != nil {
		t.Fatal(err)
	}
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	g := gateway.New(cfg, b, nil, metrics)
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = g.Close(context.Background())
		_ = p.Close(context.Background())
	})
	return srv, g, p
}

// jsCheck is one line of conformance.mjs.
type jsCheck struct {
	Name    string          `json:"name"`
	OK      bool            `json:"ok"`
	Skipped bool            `json:"skipped"`
	Detail  json.RawMessage `json:"detail"`
}

// nodeOrSkip finds node and the installed official client, or skips (a
// failure under GRADIOPOOL_REQUIRE_NODE=1, as in make test).
func nodeOrSkip(t *testing.T) (node, dir string) {
	t.Helper()
	skip := func(msg string) {
		if os.Getenv("GRADIOPOOL_REQUIRE_NODE") == "1" {
			t.Fatal(msg + " (GRADIOPOOL_REQUIRE_NODE=1)")
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node not found in PATH: the official JS client tests need Node 20+")
	}
	dir, err = filepath.Abs(filepath.Join("..", "testdata", "jsclient"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@gradio", "client", "package.json")); err != nil {
		skip("@gradio/client is not installed: run `npm ci` in testdata/jsclient (make jsclient)")
	}
	return node, dir
}

// nodeOutput runs a script of testdata/jsclient to its end and returns its
// stdout; it fails the test when the script fails. timeout is a hang guard.
func nodeOutput(t *testing.T, timeout time.Duration, script string, args ...string) []byte {
	t.Helper()
	node, dir := nodeOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	return out
}

// runNode runs a script of testdata/jsclient and returns its stdout lines
// as checks; the bound is a hang guard.
func runNode(t *testing.T, script string, args ...string) []jsCheck {
	t.Helper()
	node, dir := nodeOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish (hang guard)\nstdout:\n%s\nstderr:\n%s", script, stdout.String(), stderr.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	var out []jsCheck
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var c jsCheck
		if err := json.Unmarshal(line, &c); err != nil {
			t.Errorf("unparsable line from %s: %s", script, line)
			continue
		}
		out = append(out, c)
	}
	if t.Failed() || len(out) == 0 {
		t.Logf("%s stderr:\n%s", script, stderr.String())
	}
	return out
}

// spreadApp is the default app plus "hold": stateless, one call at a time
// per replica (Gradio's default), running until gate closes.
func spreadApp(gate chan struct{}) *gradiotest.App {
	app := gradiotest.DefaultApp()
	app.Handle("hold", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		s, _ := c.String(0)
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []any{"held " + s}, nil
	}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	// measured: upper that takes 20 ms, so that the slot time a call
	// measures, and the queue's ETA from it, is not below the
	// millisecond the front door rounds rank_eta to.
	app.Handle("measured", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		s, _ := c.String(0)
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []any{strings.ToUpper(s)}, nil
	}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	return app
}

// fdMessages opens session's queue/data stream through the front door and
// sends every message on the returned channel, closed at the stream's end.
func fdMessages(t *testing.T, base, session string) <-chan map[string]any {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return fdMessagesCtx(t, ctx, base, session)
}

// fdMessagesCtx is fdMessages whose stream ends with ctx.
func fdMessagesCtx(t *testing.T, ctx context.Context, base, session string) <-chan map[string]any {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/gradio_api/queue/data?session_hash="+session, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan map[string]any, 256)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			d, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m map[string]any
			if json.Unmarshal([]byte(d), &m) == nil {
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// checkJSQueueStatus checks what queue_status.mjs printed of a call that
// waited in the gateway's queue until its time-out (one slot, taken): a
// pending status with queue, position 0 of 1 and an ETA, then an error
// status with the gateway's busy message.
func checkJSQueueStatus(t *testing.T, out []byte) {
	t.Helper()
	queued, last := jsQueueStatuses(out)
	if queued == nil || !queued.Queue || *queued.Position != 0 || queued.Size == nil || *queued.Size != 1 || queued.ETA == nil || *queued.ETA <= 0 {
		t.Errorf("no pending status with queue, position 0 of 1 and an ETA; the JS client printed:\n%s", out)
	}
	if last == nil || last.Stage != "error" || !strings.Contains(last.Message, "gradiopool: all 1 replicas are busy; waited") {
		t.Errorf("the call did not end with the gateway's busy message; the JS client printed:\n%s", out)
	}
	if queued != nil && queued.ETA != nil {
		t.Logf("the JS client shows: position %d of %d, eta %.3fs; then %q", *queued.Position, *queued.Size, *queued.ETA, last.Message)
	}
}

// jsQueueStatuses returns, of what queue_status.mjs printed, the first
// pending status with a queue position and the last status.
func jsQueueStatuses(out []byte) (queued, last *jsStatus) {
	for line := range strings.Lines(string(out)) {
		var m struct {
			Status *jsStatus `json:"status"`
		}
		if json.Unmarshal([]byte(line), &m) != nil || m.Status == nil {
			continue
		}
		last = m.Status
		if m.Status.Stage == "pending" && m.Status.Position != nil && queued == nil {
			queued = m.Status
		}
	}
	return queued, last
}

// jsStatus is a status event the JS client showed.
type jsStatus struct {
	Stage    string   `json:"stage"`
	Queue    bool     `json:"queue"`
	Position *int     `json:"position"`
	Size     *int     `json:"size"`
	ETA      *float64 `json:"eta"`
	Message  string   `json:"message"`
}

// bridgedMode reports whether the front door bridges mode's replicas.
// Before Gradio 4.21 /info publishes no Python parameter names: the front
// door names the parameters after their labels (appshape.PresentInfo), which the
// reference app's Python names differ from in two endpoints, so view_api
// is not required of them.
func bridgedMode(m gradiotest.Mode) bool {
	return m.Protocol() != "sse_v3"
}

// frontdoorGrace is frontdoor.read_grace's default.
const frontdoorGrace = 5 * time.Second
