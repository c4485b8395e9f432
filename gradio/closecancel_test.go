package gradio_test

import (
	"context"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// Regression (issue 16, defect 3): a /cancel started because a job's ctx
// ended was lost when its session closed right after (Close cancelled the
// session's context before waiting for the cancels derived from it); 0-2 of
// 20 reached the app. Close must wait for them, and a job still pending at
// Close is cancelled at the app too.
func TestCloseRightAfterCancelSendsCancel(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, func(s *gradiotest.Server) { s.DefaultConcurrencyLimit = -1 })
	app := connect(t, srv.URL)
	const n = 20
	for i := 0; i < n; i++ {
		s := app.NewSession()
		ctx, cancel := context.WithCancel(testCtx(t))
		j, err := s.Submit(ctx, "slow", 1000) // 10 s at TimeScale 0.01
		if err != nil {
			t.Fatal(err)
		}
		for ev := range j.Events() {
			if ev.Kind == gradio.EventStarted {
				break
			}
		}
		cancel()
		s.Close()
	}
	if got := srv.Requests("cancel"); got != n {
		t.Errorf("%d of %d cancels reached the app before Close returned", got, n)
	}
	waitFor(t, func() bool { return srv.Snapshot().Running == 0 })

	// A job still pending when its session closes is cancelled too.
	s := app.NewSession()
	j, err := s.Submit(testCtx(t), "slow", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for ev := range j.Events() {
		if ev.Kind == gradio.EventStarted {
			break
		}
	}
	s.Close()
	if got := srv.Requests("cancel"); got != n+1 {
		t.Errorf("Close of a session with a job running sent %d cancels, want 1", got-n)
	}
	waitFor(t, func() bool { return srv.Snapshot().Running == 0 })
}
