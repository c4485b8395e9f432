package main

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestServeSIGHUP: SIGHUP (systemctl reload) no longer kills the gateway:
// a call in flight finishes, the gateway keeps serving and says in its log
// that nothing was reloaded.
func TestServeSIGHUP(t *testing.T) {
	sim := gradiotest.NewServer(gradiotest.DefaultApp())
	defer sim.Close()
	g := startServe(t, []string{"GRADIOPOOL_LOG_FORMAT=json", "GRADIOPOOL_REPLICAS=" + sim.URL}, "--listen", "127.0.0.1:0")
	type result struct {
		status int
		err    error
	}
	slow := make(chan result, 1)
	go func() {
		resp, err := http.Post(g.url+"/v1/predict/slow", "application/json", strings.NewReader(`{"data":[1]}`))
		if err != nil {
			slow <- result{err: err}
			return
		}
		resp.Body.Close()
		slow <- result{status: resp.StatusCode}
	}()
	// Bounded wait until the slow call is running (the access log of the
	// call comes at its end, so look at the replica instead).
	for i := 0; i < 200 && sim.Snapshot().Running == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if r := <-slow; r.err != nil || r.status != 200 {
		t.Fatalf("the call in flight during SIGHUP: %d %v\n%s", r.status, r.err, g.stderr.String())
	}
	select {
	case err := <-g.waited:
		t.Fatalf("serve exited after SIGHUP: %v\n%s", err, g.stderr.String())
	default:
	}
	resp, err := http.Get(g.url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after SIGHUP: %v %v", resp, err)
	}
	resp.Body.Close()
	for i := 0; i < 200 && !strings.Contains(g.stderr.String(), "SIGHUP: reloading the configuration is not supported yet"); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(g.stderr.String(), "SIGHUP: reloading the configuration is not supported yet") {
		t.Errorf("no log line for SIGHUP:\n%s", g.stderr.String())
	}
}
