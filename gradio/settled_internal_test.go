package gradio

import (
	"context"
	"errors"
	"testing"
)

// TestJoinCutByTheCallersDeadline: a join sent in full whose own request
// failed because the caller's deadline (its deadline too) passed is
// reported as ErrMaybeAccepted, as when the caller stops waiting first.
// Before, whichever the caller saw first decided: pool's
// TestStalledReplica got a bare context error 3 times in 40 on a loaded
// machine, the pool then reporting only the deadline.
func TestJoinCutByTheCallersDeadline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sent := &ConnectionLostError{MaybeAccepted: true, Err: context.Canceled}
	if _, err := settled(ctx, nil, sent); !errors.Is(err, ErrMaybeAccepted) {
		t.Errorf("a join sent and cut by the caller's end: %v, want ErrMaybeAccepted", err)
	}
	unsent := &ConnectionLostError{Err: context.Canceled}
	if _, err := settled(ctx, nil, unsent); err != unsent {
		t.Errorf("a join never sent: %v, want it unchanged (not accepted)", err)
	}
	if _, err := settled(context.Background(), nil, sent); err != sent {
		t.Errorf("a join cut while the caller still waits: %v, want it unchanged", err)
	}
}

// TestWaitPrefersTheJobsOutcome: a job that has finished gives its own
// outcome to a Wait whose ctx has also ended (a /v1/submit caller that
// left after its call failed with slow_reader was counted as cancelled in
// about half of the calls: make abuse's row 11, 3 of 4).
func TestWaitPrefersTheJobsOutcome(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 100 { // each was a coin toss before
		j := &Job{done: make(chan struct{}), err: ErrSlowReader}
		close(j.done)
		if _, err := j.Wait(ctx); !errors.Is(err, ErrSlowReader) {
			t.Fatalf("Wait of a failed job with its ctx ended: %v, want the job's ErrSlowReader", err)
		}
	}
}
