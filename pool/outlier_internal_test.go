package pool

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// fakeClock is the pool's clock in these tests: the ejection back-off runs
// on it, so a minute passes in no time.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// outlierPool is a pool of one replica whose app is connected to a
// simulated app (only for the replica's state: no call is made), on an
// injected clock, without the background prober.
func outlierPool(t *testing.T) (*Pool, *replica, *fakeClock) {
	t.Helper()
	srv := gradiotest.NewServer(nil)
	t.Cleanup(srv.Close)
	p, err := New(Config{Replicas: []string{srv.URL}, ProbeInterval: -1, MinConnections: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p.cfg.clock = clk.now
	r := p.set.Load().list[0]
	if _, _, err := r.getApp(t.Context()); err != nil {
		t.Fatal(err)
	}
	return p, r, clk
}

// TestOutlierEjectionHolds: a replica that answers its config and pings
// but refuses every join (500) is ejected for ever longer (1 s doubling to
// 1 min), never reset by a passing probe, and spends more than 90 % of a
// 60 s window ejected; the calls it costs are counted. A call arrives every
// 50 ms; the prober's ping passes every 2 s.
func TestOutlierEjectionHolds(t *testing.T) {
	p, r, clk := outlierPool(t)
	start := clk.t
	refusal := &gradio.ProtocolError{Op: "queue/join", StatusCode: http.StatusInternalServerError}
	const step = 50 * time.Millisecond
	var admitted, ejectedSteps, steps, ejections int
	var durations []time.Duration
	for clk.t.Before(start.Add(time.Minute)) {
		if clk.t.Sub(start)%(2*time.Second) == 0 {
			r.probePassed() // the app answers: says nothing about its calls
			p.probeRound(clk.t)
		}
		if ok, probe, _ := r.admit(clk.t); ok {
			if probe {
				t.Fatal("a connected replica refusing calls was probed instead of tried")
			}
			admitted++
			r.refused(refusal)
		}
		r.mu.Lock()
		ejected := !r.ejectUntil.IsZero()
		if r.fails != ejections {
			ejections = r.fails
			durations = append(durations, r.ejectUntil.Sub(clk.t))
		}
		r.mu.Unlock()
		steps++
		if ejected {
			ejectedSteps++
		}
		clk.t = clk.t.Add(step)
	}
	share := float64(ejectedSteps) / float64(steps)
	t.Logf("60 s: %d calls tried on the replica (refused, moved elsewhere), %d ejections %v, ejected %.1f %% of the time",
		admitted, ejections, durations, 100*share)
	if share <= 0.9 {
		t.Errorf("ejected %.1f %% of the window, want > 90 %%", 100*share)
	}
	// 3 refusals before the first ejection, then one trial per half-open
	// round (its refusal ejects at once): ejections of 1, 2, 4, 8, 16, 32 s
	// fit in the minute, 8 calls in all.
	if want := defaultEjectAfterRefusals + ejections - 1; admitted != want || ejections != 6 {
		t.Errorf("%d calls tried in %d ejections, want %d in 6", admitted, ejections, want)
	}
	for i, d := range durations {
		want := min(defaultEjectBase<<i, defaultEjectMax)
		if d != want {
			t.Errorf("ejection %d lasted %s, want %s", i+1, d, want)
		}
	}
	st := p.Stats(t.Context()).Pools[r.name]
	if st.State != StateEjected || st.ConsecutiveFailures != ejections || st.EjectedSecondsLeft <= 0 {
		t.Errorf("stats: state %s, consecutive %d, left %.1f s; want ejected, %d, > 0", st.State, st.ConsecutiveFailures, st.EjectedSecondsLeft, ejections)
	}
	if p.Ready() {
		t.Error("Ready with the only replica ejected")
	}
}

// TestOutlierServedCallResets: a half-open replica whose trial call is
// served is ready again and its count starts over; a call that began
// before the last ejection does not count.
func TestOutlierServedCallResets(t *testing.T) {
	p, r, clk := outlierPool(t)
	refusal := &gradio.ProtocolError{Op: "queue/join", StatusCode: http.StatusInternalServerError}
	before := clk.t
	for range defaultEjectAfterRefusals {
		r.refused(refusal)
	}
	if ok, _, _ := r.admit(clk.t); ok {
		t.Fatal("admitted while ejected")
	}
	r.served(before.Add(-time.Second)) // a slow call from before the ejection ends
	if r.state() != StateEjected {
		t.Fatalf("state %s after an old call finished, want ejected", r.state())
	}
	clk.t = clk.t.Add(defaultEjectBase)
	if p.Ready() {
		t.Error("Ready once the back-off ran out, before the prober or a call changed the state")
	}
	// A caller comes before the prober's trial: it is the first trial.
	for i := range halfOpenTrials {
		if ok, _, _ := r.admit(clk.t); !ok {
			t.Fatalf("trial %d refused", i+1)
		}
	}
	if got := r.state(); got != stateHalfOpen || !p.Ready() {
		t.Fatalf("after the back-off: state %s ready %v, want half-open and ready", got, p.Ready())
	}
	if ok, _, _ := r.admit(clk.t); ok {
		t.Fatalf("more than %d trial calls at once", halfOpenTrials)
	}
	r.served(clk.t)
	st := p.Stats(t.Context()).Pools[r.name]
	if st.State != StateReady || st.ConsecutiveFailures != 0 || !p.Ready() {
		t.Fatalf("after a served trial: %+v", st)
	}
}

// TestOutlierUnreachableEndsOnConnect: a replica ejected because it could
// not be reached is ready again as soon as a probe connects, before its
// back-off ends, and on probation: one refused call ejects it for twice
// as long.
func TestOutlierUnreachableEndsOnConnect(t *testing.T) {
	p, r, clk := outlierPool(t)
	for range 5 {
		r.fail(&gradio.ConnectError{Src: "x", Err: context.DeadlineExceeded})
		clk.t = clk.t.Add(time.Minute)
	}
	r.fail(&gradio.ConnectError{Src: "x", Err: context.DeadlineExceeded})
	if st := p.Stats(t.Context()).Pools[r.name]; st.State != StateEjected || !st.Unreachable || p.Ready() {
		t.Fatalf("unreachable: %+v ready %v", st, p.Ready())
	}
	if err := r.probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(t.Context()).Pools[r.name]; st.State != StateReady || st.ConsecutiveFailures != 6 || !p.Ready() {
		t.Fatalf("after a probe connected: %+v", st)
	}
	r.refused(&gradio.ProtocolError{Op: "queue/join", StatusCode: http.StatusBadGateway})
	r.mu.Lock()
	left := r.ejectUntil.Sub(clk.t)
	r.mu.Unlock()
	if left != defaultEjectMax {
		t.Fatalf("one refusal on probation: ejected for %s, want %s", left, defaultEjectMax)
	}
}

// TestOutlierProbeTrialCloses: a replica ejected for refusals whose
// back-off is over gets the prober's own trial (a ping), with no caller:
// it passes, so the replica is ready on probation (its count kept), and
// one refused call ejects it again for twice as long. Before, it stayed
// ejected, then half-open, until a user's call tried it.
func TestOutlierProbeTrialCloses(t *testing.T) {
	p, r, clk := outlierPool(t)
	refusal := &gradio.ProtocolError{Op: "queue/join", StatusCode: http.StatusInternalServerError}
	for range defaultEjectAfterRefusals {
		r.refused(refusal)
	}
	p.probeRound(clk.t)
	waitChecked(t, r)
	if st := r.state(); st != StateEjected {
		t.Fatalf("probed during its back-off: %s", st)
	}
	clk.t = clk.t.Add(defaultEjectBase)
	p.probeRound(clk.t)
	waitChecked(t, r)
	st := p.Stats(t.Context()).Pools[r.name]
	if st.State != StateReady || st.ConsecutiveFailures != 1 || !p.Ready() {
		t.Fatalf("after the prober's trial: %+v", st)
	}
	r.refused(refusal)
	r.mu.Lock()
	left := r.ejectUntil.Sub(clk.t)
	r.mu.Unlock()
	if left != 2*defaultEjectBase {
		t.Fatalf("one refusal on probation: ejected for %s, want %s", left, 2*defaultEjectBase)
	}
}

// waitChecked waits for the prober's check of r started by probeRound.
func waitChecked(t *testing.T, r *replica) {
	t.Helper()
	for range 1000 {
		if !r.checking.Load() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the probe did not end within 5 s")
}
