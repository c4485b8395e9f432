package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorBridgeDrain: a bridged call keeps a drain waiting until it
// completes; one still running at drain_timeout ends with Gradio's error
// completion saying the gateway restarts, then close_stream, and the
// replica's call is stopped, not run again.
func TestFrontDoorBridgeDrain(t *testing.T) {
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio4SSE, gradiotest.Gradio4SSEv1} {
		t.Run(string(mode)+"/waits", func(t *testing.T) {
			release := make(chan struct{})
			url, sim, _, drain, served := drainGatewayMode(t, mode, fdtest.HoldApp(release), time.Minute)
			call := openFront(t, url, "bdrain1", fdtest.FnIndex(t, url, "hold"))
			fdtest.WaitFor(t, "the call to run on the replica", func() bool { return sim.Snapshot().Running == 1 })
			drain()
			fdtest.WaitFor(t, "readyz 503", func() bool { return do(t, "GET", url+"/readyz", "").status == 503 })
			select {
			case <-served:
				t.Fatal("Serve returned while a bridged call ran")
			default:
			}
			close(release)
			<-call.done
			if m := call.completed(); m == nil || m["success"] != true {
				t.Fatalf("the call did not complete: %s", call.text())
			}
			<-served
		})
		t.Run(string(mode)+"/timeout", func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			url, sim, _, drain, served := drainGatewayMode(t, mode, fdtest.HoldApp(release), 300*time.Millisecond)
			call := openFront(t, url, "bdrain2", fdtest.FnIndex(t, url, "hold"))
			fdtest.WaitFor(t, "the call to run on the replica", func() bool { return sim.Snapshot().Running == 1 })
			drain()
			select {
			case <-call.done:
			case <-time.After(20 * time.Second): // hang guard
				t.Fatal("the stream was not ended after drain_timeout")
			}
			m := call.completed()
			out, _ := m["output"].(map[string]any)
			if m == nil || m["success"] != false || !strings.Contains(fmt.Sprint(out["error"]), "restarting") {
				t.Fatalf("stream after drain_timeout:\n%s", call.text())
			}
			if !strings.HasSuffix(strings.TrimSpace(call.text()), `data: {"msg":"close_stream","event_id":null}`) {
				t.Errorf("the stream does not end with close_stream:\n%s", call.text())
			}
			<-served
			fdtest.WaitFor(t, "the replica's call stopped", func() bool { return sim.Snapshot().Running == 0 })
			if n := sim.Executions("hold"); n != 1 {
				t.Errorf("hold ran %d times", n)
			}
		})
	}
}
