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
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// nextRouteFiles are the Next.js app's server files the route handler
// needs; the pages (React) are left to `npm run typecheck` in the app.
var nextRouteFiles = []string{
	"app/api/predict/route.ts", "app/login/route.ts", "app/login/oauth.ts", "app/login/callback/route.ts",
	"lib/clients.ts", "lib/predict.ts", "lib/session.ts",
}

// TestSpaceNextRoute type-checks the Space's Next.js route handler
// (hf-space/nextjs/app/api/predict/route.ts and what it imports) with tsc
// --noEmit under the app's compiler options, compiles it, and drives its
// POST(Request) with node against a gateway over two simulated replicas:
// three calls of one signed-in user to the gr.State endpoint "counter" see
// their own list grow (one @gradio/client per user, kept), another user's
// call starts empty between them (never crosses users), anonymous calls
// and a forged session cookie keep nothing, and the cache closes Clients
// past its TTL and its size. typescript and @types/node come from
// testdata/nextjs-check (`make jsclient` installs it), @gradio/client from
// testdata/jsclient.
func TestSpaceNextRoute(t *testing.T) {
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
	jsclient, _ := filepath.Abs("../testdata/jsclient/node_modules")
	check, _ := filepath.Abs("../testdata/nextjs-check/node_modules")
	if _, err := os.Stat(filepath.Join(jsclient, "@gradio", "client", "package.json")); err != nil {
		skip("@gradio/client is not installed: run `make jsclient`")
	}
	if _, err := os.Stat(filepath.Join(check, "typescript", "bin", "tsc")); err != nil {
		skip("typescript is not installed in testdata/nextjs-check: run `make jsclient`")
	}

	dir := t.TempDir()
	for _, f := range nextRouteFiles {
		b, err := os.ReadFile(filepath.Join("hf-space/nextjs", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("testdata/nextjs_check.cjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nextjs_check.cjs"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	nm := filepath.Join(dir, "node_modules")
	for link, target := range map[string]string{"@gradio": filepath.Join(jsclient, "@gradio"), "@types": filepath.Join(check, "@types"),
		"undici-types": filepath.Join(check, "undici-types")} {
		if err := os.MkdirAll(nm, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(nm, link)); err != nil {
			t.Fatal(err)
		}
	}
	// The app's own compiler options (hf-space/nextjs/tsconfig.json)
	// without the React and Next.js parts; then the same sources compiled
	// to CommonJS for node.
	var app struct {
		CompilerOptions map[string]any `json:"compilerOptions"`
	}
	raw, err := os.ReadFile("hf-space/nextjs/tsconfig.json")
	if err != nil || json.Unmarshal(raw, &app) != nil {
		t.Fatalf("hf-space/nextjs/tsconfig.json: %v", err)
	}
	opts := app.CompilerOptions
	delete(opts, "plugins")
	delete(opts, "jsx")
	opts["types"] = []string{"node"}
	writeJSON(t, filepath.Join(dir, "tsconfig.json"), map[string]any{"compilerOptions": opts, "files": nextRouteFiles})
	writeJSON(t, filepath.Join(dir, "tsconfig.emit.json"), map[string]any{
		"extends": "./tsconfig.json",
		"compilerOptions": map[string]any{"noEmit": false, "module": "commonjs", "moduleResolution": "node10",
			"outDir": "out", "rootDir": ".", "noCheck": true},
	})
	tsc := filepath.Join(check, "typescript", "bin", "tsc")
	for _, args := range [][]string{{"--noEmit", "-p", "tsconfig.json"}, {"-p", "tsconfig.emit.json"}} {
		cmd := exec.Command(node, append([]string{tsc}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tsc %v: %v\n%s", args, err, out)
		}
	}

	var urls []string
	for range 2 {
		s := gradiotest.NewServer(gradiotest.DefaultApp())
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	const key = "space-app-key"
	g, err := gateway.Open(context.Background(), gateway.Config{Pool: pool.Config{Replicas: urls, MinConnections: 1, MaxConnections: 4},
		Secrets: gateway.Secrets{APIKeys: []string{key}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = g.Close(context.Background())
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "nextjs_check.cjs", srv.URL, key)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node nextjs_check.cjs: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	got := map[string]json.RawMessage{}
	status := map[string]int{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r struct {
			Name   string
			Status int
			Body   json.RawMessage
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("unparsable line %q: %v", sc.Text(), err)
		}
		got[r.Name], status[r.Name] = r.Body, r.Status
	}
	first := func(name string) string {
		var b struct {
			Data  []any
			Error string
		}
		_ = json.Unmarshal(got[name], &b)
		if status[name] != 200 || len(b.Data) == 0 {
			t.Errorf("%s: %d %s\n%s", name, status[name], got[name], stderr.String())
			return ""
		}
		s, _ := b.Data[0].(string)
		return s
	}
	for name, want := range map[string]string{
		"alice 1": "1 items: a1", "alice 2": "2 items: a1, a2", "bob 1": "1 items: b1", "alice 3": "3 items: a1, a2, a3",
		"anonymous 1": "1 items: x1", "anonymous 2": "1 items: x2", "forged cookie": "1 items: f1",
	} {
		if s := first(name); s != want {
			t.Errorf("%s: counter answered %q, want %q", name, s, want)
		}
	}
	var cache struct {
		Closed []string
		Size   int
	}
	if err := json.Unmarshal(got["cache"], &cache); err != nil || strings.Join(cache.Closed, ",") != "b,a,c" || cache.Size != 1 {
		t.Errorf("client cache: closed %v, size %d; want b (LRU), then a (kept, not reconnected) and c (TTL), 1 left (%v)", cache.Closed, cache.Size, err)
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
