package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExampleConfigServesJSClient: configs/gradiopool.example.yaml, copied
// with only its replicas line set (to two simulated replicas), serves the
// official JS client through the front door: connect, a call, gr.State
// across three calls. The example once announced https://gradio.example.com
// as the app's root (frontdoor.public_url), and the JS client then failed
// with ENOTFOUND; every key of the file is at its default now.
//
// The listen address is given as a flag (127.0.0.1:0) because the tests of
// this machine run many gateways at once; the file's own, 127.0.0.1:8080,
// is the same loopback interface.
func TestExampleConfigServesJSClient(t *testing.T) {
	node, err := exec.LookPath("node")
	modules := filepath.Join("..", "..", "testdata", "jsclient", "node_modules", "@gradio", "client", "package.json")
	_, noModules := os.Stat(modules)
	if err != nil || noModules != nil {
		if os.Getenv("GRADIOPOOL_REQUIRE_NODE") == "1" {
			t.Fatal("node or @gradio/client missing (GRADIOPOOL_REQUIRE_NODE=1): run make jsclient")
		}
		t.Skip("node or @gradio/client missing: run make jsclient")
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "configs", "gradiopool.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const commented = "# replicas: [owner/app, https://app-2.example]\n"
	if strings.Count(string(b), commented) != 1 {
		t.Fatalf("the example has no line %q to set", commented)
	}
	_, replicas := startSims(t, 2)
	conf := strings.Replace(string(b), commented, "replicas: ["+replicas+"]\n", 1)
	path := filepath.Join(t.TempDir(), "gradiopool.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}

	// serve --check passes on the same file.
	var out, errw strings.Builder
	if err := run(context.Background(), []string{"serve", "--check", "--config", path, "--listen", "127.0.0.1:0"}, &out, &errw); err != nil {
		t.Fatalf("serve --check: %v\n%s%s", err, out.String(), errw.String())
	}

	g := startServe(t, nil, "--config", path, "--listen", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	dir, _ := filepath.Abs(filepath.Join("..", "..", "testdata", "jsclient"))
	cmd := exec.CommandContext(ctx, node, "demo.mjs", g.url+"/")
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("demo.mjs: %v\n%s\n%s", err, stdout, stderr.String())
	}
	var res struct {
		PredictOutput string `json:"predict_output"`
		StateOK       bool   `json:"state_ok"`
		Error         string `json:"error"`
	}
	if err := json.Unmarshal(stdout, &res); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if res.Error != "" || res.PredictOutput != "HELLO FROM THE OFFICIAL JS CLIENT" || !res.StateOK {
		t.Fatalf("the JS client through the example configuration: %s\ngateway log:\n%s", stdout, g.stderr.String())
	}
}
