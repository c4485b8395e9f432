package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/internal/logbuf"

	"go.uber.org/goleak"
)

func TestSimCommand(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out logbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- runSim(ctx, []string{"-replicas", "2", "-step-delay", "1ms"}, &out, io.Discard) }()
	for i := 0; !strings.Contains(out.String(), "ready:") && i < 1000; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	lines := strings.Split(out.String(), "\n")
	var replicas []string
	var hub string
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) >= 4 && f[0] == "replica":
			replicas = append(replicas, f[2])
			if !strings.HasPrefix(f[3], "sim/replica-") {
				t.Errorf("space id in %q", l)
			}
		case len(f) == 2 && f[0] == "hub":
			hub = f[1]
		}
	}
	if len(replicas) != 2 || hub == "" {
		t.Fatalf("output:\n%s", out.String())
	}
	for _, u := range []string{replicas[0] + "/config", replicas[1] + "/_sim/state", hub + "/api/spaces/sim/replica-2/host", hub + "/api/spaces/owner/app/host"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", u, resp.StatusCode)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "stopped") {
		t.Errorf("no stop line:\n%s", out.String())
	}
}

func TestSimUsage(t *testing.T) {
	for _, args := range [][]string{{"-replicas", "0"}, {"-mode", "gradio3"}, {"-addr", "nonsense"}, {"extra"}, {"-bogus"}, {"-app", "nope"}, {"-hub-start-time", "-1s"}, {"-hub-rate-limit", "-1"}, {"-hub-hardware", "tpu-9"}} {
		err := runSim(context.Background(), args, io.Discard, io.Discard)
		if !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestSimHubOwnerToken: --hub-owner-token guards the runtime routes, and a
// paused Space's replica refuses calls until a restart has run its stages.
func TestSimHubOwnerToken(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out logbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runSim(ctx, []string{"-replicas", "1", "-hub-owner-token", "hf_own", "-hub-start-time", "1ms",
			"-hub-build-time", "1ms", "-hub-hardware", "l4x1"}, &out, io.Discard)
	}()
	for i := 0; !strings.Contains(out.String(), "ready:") && i < 1000; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	var replica, hub string
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[0] == "replica":
			replica = f[2]
		case len(f) == 2 && f[0] == "hub":
			hub = f[1]
		}
	}
	if replica == "" || hub == "" {
		t.Fatalf("output:\n%s", out.String())
	}
	call := func(method, url, token string) int {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	pause := hub + "/api/spaces/sim/replica-1/pause"
	if st := call("POST", pause, ""); st != 401 {
		t.Errorf("pause without a token: %d", st)
	}
	if st := call("POST", pause, "hf_visitor"); st != 403 {
		t.Errorf("pause by a non-owner: %d", st)
	}
	if st := call("GET", replica+"/config", ""); st != 200 {
		t.Fatalf("config before the pause: %d", st)
	}
	if st := call("POST", pause, "hf_own"); st != 200 {
		t.Fatalf("pause by the owner: %d", st)
	}
	if st := call("GET", replica+"/config", ""); st != 503 {
		t.Errorf("config of a paused Space: %d", st)
	}
	if st := call("POST", hub+"/api/spaces/sim/replica-1/restart", "hf_own"); st != 200 {
		t.Fatalf("restart: %d", st)
	}
	st := 0
	for i := 0; i < 400 && st != 200; i++ {
		time.Sleep(5 * time.Millisecond)
		st = call("GET", replica+"/config", "")
	}
	if st != 200 {
		t.Errorf("config after the restart: %d", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
