package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestSpaceRouteHandler runs the Space app's route handler
// (hf-space/app/route.mjs) with node against a gateway over two simulated
// replicas, with the official @gradio/client that `make jsclient` installs
// in testdata/jsclient (no second npm install). It checks the answers and
// that the gateway saw the signed-in user: one user assignment, made by
// the X-Gradiopool-User header only the signed-in call carried.
func TestSpaceRouteHandler(t *testing.T) {
	skip := func(msg string) {
		if os.Getenv("GRADIOPOOL_REQUIRE_NODE") == "1" {
			t.Fatal(msg + " (GRADIOPOOL_REQUIRE_NODE=1)")
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node not found in PATH: the route handler test needs Node 20+")
	}
	modules, err := filepath.Abs("../testdata/jsclient/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "@gradio", "client", "package.json")); err != nil {
		skip("@gradio/client is not installed: run `make jsclient`")
	}
	// route.mjs imports "@gradio/client": run it from a directory whose
	// node_modules is the installed one.
	dir := t.TempDir()
	for src, dst := range map[string]string{"hf-space/app/route.mjs": "route.mjs", "testdata/space_check.mjs": "space_check.mjs"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}

	// The server and the start script are not run here (OAuth needs
	// Hugging Face); they must at least parse.
	if out, err := exec.Command(node, "--check", "hf-space/app/server.mjs").CombinedOutput(); err != nil {
		t.Errorf("node --check server.mjs: %v\n%s", err, out)
	}
	if out, err := exec.Command("sh", "-n", "hf-space/start.sh").CombinedOutput(); err != nil {
		t.Errorf("sh -n start.sh: %v\n%s", err, out)
	}

	var urls []string
	for range 2 {
		s := gradiotest.NewServer(gradiotest.DefaultApp())
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	const key = "space-app-key"
	cfg := gateway.Config{Pool: pool.Config{Replicas: urls, MinConnections: 1, MaxConnections: 4},
		Secrets: gateway.Secrets{APIKeys: []string{key}}}
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

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "space_check.mjs", srv.URL, key, "Alice@Example.com")
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node space_check.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	type result struct {
		Name   string
		Status int
		Body   struct {
			Data  []any
			Error string
		}
	}
	got := map[string]result{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("unparsable line %q: %v", sc.Text(), err)
		}
		got[r.Name] = r
	}
	if r := got["signed in"]; r.Status != 200 || len(r.Body.Data) != 1 || r.Body.Data[0] != "HELLO SPACE" {
		t.Errorf("signed-in call: %+v\n%s", r, stderr.String())
	}
	if r := got["anonymous"]; r.Status != 200 || len(r.Body.Data) != 1 || r.Body.Data[0] != "ANON" {
		t.Errorf("anonymous call: %+v", r)
	}
	if r := got["state"]; r.Status != 200 || len(r.Body.Data) == 0 {
		t.Errorf("gr.State call: %+v", r)
	}
	if r := got["unknown endpoint"]; r.Status < 400 || r.Body.Error == "" {
		t.Errorf("unknown endpoint: %+v, want an error status and message", r)
	}
	if n := p.Stats(context.Background()).UserAssignments; n != 1 {
		t.Errorf("the gateway holds %d user assignments, want 1 (the signed-in user; the anonymous call has none)", n)
	}
}
