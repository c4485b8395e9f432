package pool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// Regression (issue 16, defect 5): while a replica stalled on queue/join
// the caller's own deadline was overrun by the whole header time-out (the
// join runs without the caller's cancel, so that a maybe-accepted call is
// never retried). The caller now gets ErrMaybeAccepted at its deadline;
// the join ends in the background and a job the app accepted after all is
// cancelled there. Never twice, and nothing left behind.
func TestStalledJoinAnswersAtTheCallersDeadline(t *testing.T) {
	srvs := replicas(t, 2)
	const headerTimeout = 20 * time.Second
	p := newPool(t, pool.Config{Replicas: urls(srvs), MaxConnections: 2,
		ClientOptions: []gradio.Option{gradio.WithHeaderTimeout(headerTimeout)}})
	ctx := ctxT(t)
	if _, err := p.Predict(ctx, "", "upper", "warm"); err != nil {
		t.Fatal(err)
	}
	for _, s := range srvs {
		s.SetStall(true)
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Predict(cctx, "", "upper", "stalled")
	took := time.Since(start)
	if !errors.Is(err, gradio.ErrMaybeAccepted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Predict on a stalled join: %v, want ErrMaybeAccepted and the deadline", err)
	}
	// Only a bound far above the deadline: the point is not waiting for
	// the join's header time-out.
	if took >= headerTimeout/2 {
		t.Errorf("answered after %v, the join's header time-out, not the caller's deadline", took)
	}
	for _, s := range srvs {
		s.SetStall(false)
	}
	// The join now reaches the app, which queues the call; the client
	// cancels it. It ran at most once, on one replica, and every session
	// comes back.
	waitUntil(t, func() bool {
		st := p.Stats(ctx)
		return st.InUseConnections == 0 && srvs[0].Snapshot().Running == 0 && srvs[1].Snapshot().Running == 0
	})
	if n, each := executions(srvs, "upper"); n > 2 {
		t.Errorf("upper ran %d times (%v): the stalled call ran twice", n, each)
	}
	if _, err := p.Predict(ctx, "", "upper", "after"); err != nil {
		t.Errorf("after the stall: %v", err)
	}
}
