package gradio_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestCancelQueuedNeverRuns: a job cancelled while it waits in the app's
// queue must never run. Real Gradio keeps such an event queued after
// /cancel (and the simulator imitates it), so the client drops the
// session's stream first. The proof is FIFO order: a later call starts
// only after everything queued before it, so if the cancelled job were
// still queued it would have run before the probe.
func TestCancelQueuedNeverRuns(t *testing.T) {
	// The releases whose real servers drop a hung-up session's queued
	// events promptly
	// (hangUpDropsQueued), and Gradio 6, whose /cancel removes the event.
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio6, gradiotest.Gradio4SSEv3, gradiotest.Gradio4SSEv1} {
		for _, how := range []string{"ctx", "Cancel"} {
			t.Run(string(mode)+"/"+how, func(t *testing.T) {
				srv := startSim(t, mode, nil, nil)
				a := connect(t, srv.URL)
				defer a.Close()
				b := a.NewSession()
				defer b.Close()
				ctx := testCtx(t)

				actx, acancel := context.WithCancel(ctx)
				defer acancel()
				running, err := a.Submit(actx, "slow", 100000) // holds the slot (limit 1)
				if err != nil {
					t.Fatal(err)
				}
				waitKind(t, running, gradio.EventStarted)

				bctx, bcancel := context.WithCancel(ctx)
				defer bcancel()
				queued, err := b.Submit(bctx, "slow", 100000)
				if err != nil {
					t.Fatal(err)
				}
				waitKind(t, queued, gradio.EventQueued)
				if how == "ctx" {
					bcancel()
				} else if err := queued.Cancel(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := queued.Wait(ctx); err == nil {
					t.Fatal("the cancelled job succeeded")
				}
				// The app drops the event when it notices the hang-up (Gradio
				// looks every 50 ms); until then freeing the slot could still
				// start it, on the simulator as on Gradio.
				waitFor(t, func() bool { return srv.Snapshot().Queued == 0 })
				acancel()
				if _, err := running.Wait(ctx); !errors.Is(err, context.Canceled) {
					t.Fatalf("running job: %v", err)
				}
				// Cancelling a running job needs Gradio 4.29+; older apps stop
				// it when the idle stream closes, which takes a few seconds.
				out, err := b.Predict(ctx, "slow", 0)
				if err != nil || str(t, out[0]) != "slept 0.00s" {
					t.Fatalf("probe: %s %v", out, err)
				}
				if n := srv.Executions("slow"); n != 2 {
					t.Errorf("slow ran %d times, want 2 (the running job and the probe; the cancelled queued one never)", n)
				}
			})
		}
	}
}

// waitKind reads j's events until one of kind k (or fails at the end).
func waitKind(t *testing.T, j *gradio.Job, k gradio.EventKind) {
	t.Helper()
	for ev := range j.Events() {
		if ev.Kind == k {
			return
		}
		if ev.Kind == gradio.EventCompleted || ev.Kind == gradio.EventError {
			t.Fatalf("job ended (%v %v) before %v", ev.Kind, ev.Err, k)
		}
	}
	t.Fatalf("events ended before %v", k)
}
