package gateway_test

import (
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// Regression (issue 16, defect 5), through the gateway: a caller whose
// X-Gradiopool-Timeout passes while the replica stalls on queue/join gets
// 504 maybe_accepted at its deadline, not after the join's 30 s header
// time-out.
func TestStalledJoinRespectsTimeoutHeader(t *testing.T) {
	srv, sims, p := realGateway(t, 1, nil)
	if a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["warm"]}`); a.status != 200 {
		t.Fatal(a.status, a.body)
	}
	sims[0].SetStall(true)
	start := time.Now()
	a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`, gateway.TimeoutHeader, "400ms")
	took := time.Since(start)
	if a.status != 504 || errorCode(t, a.body) != "maybe_accepted" {
		t.Errorf("%d %s, want 504 maybe_accepted", a.status, a.body)
	}
	if took > 15*time.Second {
		t.Errorf("answered after %v: not at the caller's deadline", took)
	}
	sims[0].SetStall(false)
	fdtest.WaitFor(t, "the session to come back", func() bool {
		return p.Stats(t.Context()).InUseConnections == 0 && sims[0].Snapshot().Running == 0
	})
	if n := sims[0].Executions("upper"); n > 2 {
		t.Errorf("upper ran %d times", n)
	}
}

// A caller whose deadline passes while its accepted call runs on a replica
// that then hangs gets its answer at the deadline: the answer does not wait
// for the session to come back, which waits for the app's cancel, which a
// hung replica holds (here for as long as the test keeps it hung; the long
// fault matrix saw a 4 s answer for a 2 s deadline).
func TestDeadlineAnswerDoesNotWaitForHungReplica(t *testing.T) {
	srv, sims, p := realGateway(t, 1, func(c *gateway.Config) {
		c.Pool.ClientOptions = append(c.Pool.ClientOptions, gradio.WithCancelTimeout(time.Hour))
	})
	if a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["warm"]}`); a.status != 200 {
		t.Fatal(a.status, a.body)
	}
	answered := make(chan answer, 1)
	go func() {
		answered <- do(t, "POST", srv.URL+"/v1/predict/slow", `{"data":[30]}`, gateway.TimeoutHeader, "1s")
	}()
	fdtest.WaitFor(t, "the slow call to run", func() bool { return sims[0].Snapshot().Running == 1 })
	sims[0].SetStall(true)
	defer sims[0].SetStall(false)
	select {
	case a := <-answered:
		if a.status != 504 || errorCode(t, a.body) != "deadline_exceeded" {
			t.Errorf("%d %s, want 504 deadline_exceeded", a.status, a.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer while the replica hangs: the answer waits for the app's cancel")
	}
	sims[0].SetStall(false)
	fdtest.WaitFor(t, "the session to come back", func() bool { return p.Stats(t.Context()).InUseConnections == 0 })
}
