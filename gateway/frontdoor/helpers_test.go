package frontdoor_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// The Gradio-protocol helpers of the front door's tests (the gateway's
// tests keep copies of their own: test files do not cross packages).

// replicaName is the pool's name of a simulated replica (its host:port).
func replicaName(s *gradiotest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// fnIndexOf reads the front door's /config and returns the fn_index of
// api_name.
func fnIndexOf(t testing.TB, base, apiName string) int {
	t.Helper()
	resp, err := http.Get(base + "/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /config: %d %s", resp.StatusCode, b)
	}
	cfg, err := gradio.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range cfg.Dependencies {
		if d.APIName == apiName {
			return d.FnIndex
		}
	}
	t.Fatalf("no endpoint %s in the front door's config", apiName)
	return -1
}

// fdJoin posts one queue/join through the front door and returns the
// event id.
func fdJoin(base, session string, fn int, data ...any) (string, error) {
	body, _ := json.Marshal(map[string]any{"data": data, "fn_index": fn, "session_hash": session, "event_data": nil, "trigger_id": nil})
	resp, err := http.Post(base+"/gradio_api/queue/join", "application/json", strings.NewReader(string(body)))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v struct {
		EventID string `json:"event_id"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &v) != nil || v.EventID == "" {
		return "", fmt.Errorf("join: %d %s", resp.StatusCode, b)
	}
	return v.EventID, nil
}

// fdStream reads one queue/data stream of session through the front door
// until close_stream (or its end) and returns the process_completed
// messages by event id.
func fdStream(base, session string) (map[string]map[string]any, error) {
	resp, err := http.Get(base + "/gradio_api/queue/data?session_hash=" + session)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	done := map[string]map[string]any{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(d), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "process_completed":
			if id, ok := m["event_id"].(string); ok {
				done[id] = m
			}
		case "close_stream":
			return done, nil
		}
	}
	return done, sc.Err()
}

// fdCall is one whole call through the front door: join, then the stream
// until its process_completed; it returns the first output.
func fdCall(t *testing.T, base, session string, fn int, data ...any) string {
	t.Helper()
	out, err := fdCallE(base, session, fn, data...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fdCallE is fdCall for goroutines other than the test's.
func fdCallE(base, session string, fn int, data ...any) (string, error) {
	id, err := fdJoin(base, session, fn, data...)
	if err != nil {
		return "", err
	}
	done, err := fdStream(base, session)
	if err != nil {
		return "", err
	}
	m := done[id]
	if m == nil || m["success"] != true {
		return "", fmt.Errorf("call %s of session %s: %v", id, session, m)
	}
	out, _ := m["output"].(map[string]any)
	data0, _ := out["data"].([]any)
	if len(data0) == 0 {
		return "", fmt.Errorf("call %s: no outputs: %v", id, m)
	}
	return fmt.Sprint(data0[0]), nil
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
	dir, err = filepath.Abs(filepath.Join("..", "..", "testdata", "jsclient"))
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

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// holdApp has one endpoint, "hold", that runs until release is closed (or
// its call is cancelled).
func holdApp(release <-chan struct{}) *gradiotest.App {
	app := gradiotest.NewApp()
	ep := app.Handle("hold", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		select {
		case <-release:
			return []any{"released"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	ep.ConcurrencyLimit = 10
	return app
}

// joinAt posts a queue/join of session hash to base and returns its event id.
func joinAt(t *testing.T, base, hash, body string) string {
	t.Helper()
	resp, err := http.Post(base+"/gradio_api/queue/join", "application/json",
		strings.NewReader(`{`+body+`,"session_hash":"`+hash+`","event_data":null,"trigger_id":null}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var j struct {
		EventID string `json:"event_id"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &j) != nil || j.EventID == "" {
		t.Fatalf("join of %s at %s: %d %s", hash, base, resp.StatusCode, b)
	}
	return j.EventID
}

// waitMsg returns the first message of ch whose msg is want, failing
// after 10 s or at the stream's end.
func waitMsg(t *testing.T, ch <-chan map[string]any, want string) map[string]any {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before %s", want)
			}
			if m["msg"] == want {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s on the stream within 10 s", want)
		}
	}
}
