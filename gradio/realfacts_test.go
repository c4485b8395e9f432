package gradio_test

// Facts measured on the real Gradio servers (docs/COMPATIBILITY.md, "Real-
// server facts"), each checked here on the simulator configured the same
// way, so that the client (and the pool on top) is tested against what real
// apps do.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// Real Gradio runs each event listener one call at a time by default
// (concurrency_limit=1, every release 3.50-6.25): a second session's call
// waits in the app's queue, reported as rank 0 of a queue of 1.
func TestFactOneCallAtATimePerListener(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, nil) // DefaultConcurrencyLimit 0: Gradio's 1
	a := connect(t, srv.URL)
	defer a.Close()
	b := a.NewSession()
	defer b.Close()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	first, err := a.Submit(ctx, "slow", 100000)
	if err != nil {
		t.Fatal(err)
	}
	waitKind(t, first, gradio.EventStarted)
	second, err := b.Submit(ctx, "slow", 0)
	if err != nil {
		t.Fatal(err)
	}
	ev := firstQueued(t, second)
	if ev.Rank != 0 || ev.QueueSize != 1 {
		t.Errorf("second call queued at rank %d of %d, want 0 of 1", ev.Rank, ev.QueueSize)
	}
	if n := srv.Snapshot().Running; n != 1 {
		t.Errorf("%d calls running, want 1", n)
	}
	cancel()
}

// demo.queue(max_size=1) (testdata/realgradio/limits_app.py) on real
// 5.49.1: with one call running and one waiting, a third join gets 503
// {"detail":"Queue is full. Max size is 1 and size is 1."}; Gradio 3.50.2
// sends {"msg":"queue_full"} on its WebSocket. Both are ErrQueueFull, and
// the refused call never runs.
func TestFactQueueMaxSize(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, func(s *gradiotest.Server) { s.MaxQueueSize = 1 })
	a := connect(t, srv.URL)
	defer a.Close()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	running, err := a.Submit(ctx, "slow", 100000)
	if err != nil {
		t.Fatal(err)
	}
	waitKind(t, running, gradio.EventStarted)
	b := a.NewSession()
	defer b.Close()
	waiting, err := b.Submit(ctx, "slow", 0)
	if err != nil {
		t.Fatal(err)
	}
	firstQueued(t, waiting)
	c := a.NewSession()
	defer c.Close()
	// Another endpoint: Gradio's max_size bounds the whole queue, and
	// the cancelled waiting call may still run "slow" once the first one
	// ends (real Gradio 4/5 keeps a cancelled queued event), so only the
	// refused call's own endpoint tells whether it ran.
	_, err = c.Submit(ctx, "upper", "refused")
	if !errors.Is(err, gradio.ErrQueueFull) || !strings.Contains(err.Error(), "Queue is full. Max size is 1 and size is 1.") {
		t.Fatalf("third call: %v, want ErrQueueFull with Gradio's message", err)
	}
	cancel()
	// The waiting call ends cancelled, or completed: the first call's
	// cancel frees its slot, and slow(0) may run and finish before the
	// waiting call's own cancel is seen (once under make test).
	if _, err := waiting.Wait(testCtx(t)); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting call: %v", err)
	}
	if n := srv.Executions("upper"); n != 0 {
		t.Errorf("the refused call ran %d times, want 0", n)
	}
}

// A restarted real app (3.50.2 ws, 4.20.1 sse_v2 and 5.49.1 sse_v3
// measured) has a new app_id and has forgotten every session: Ping reports
// ErrAppChanged, and the same Client keeps working with the same session
// hash, its gr.State starting afresh.
func TestFactRestartForgetsSessions(t *testing.T) {
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio4SSEv2, gradiotest.Gradio4SSE} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, nil)
			c := connect(t, srv.URL)
			defer c.Close()
			ctx := testCtx(t)
			if out, err := c.Predict(ctx, "counter", "a"); err != nil || str(t, out[0]) != "1 items: a" {
				t.Fatalf("before: %s %v", out, err)
			}
			srv.Restart()                // a process restart: new app_id, sessions and state gone,
			srv.CloseClientConnections() // and every connection cut
			if err := c.Ping(ctx); !errors.Is(err, gradio.ErrAppChanged) {
				t.Fatalf("Ping after restart: %v", err)
			}
			for _, tc := range [][2]string{{"b", "1 items: b"}, {"c", "2 items: b, c"}} {
				out, err := c.Predict(ctx, "counter", tc[0])
				if err != nil || str(t, out[0]) != tc[1] {
					t.Fatalf("after restart counter(%s) = %s %v, want %q", tc[0], out, err, tc[1])
				}
			}
		})
	}
}
