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
