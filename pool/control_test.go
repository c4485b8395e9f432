package pool_test

import (
	"errors"
	"testing"

	"github.com/gradiopool/gradiopool/pool"
)

// TestControlDrain: a drained replica finishes its call in flight and the
// caller already in its queue, takes no new call (users pinned there and
// anonymous ones go to the other replica; a slot pinned to it is refused
// with ErrHeld), shows draining, then drained, keeps its control across a
// reload that keeps it, and serves again once enabled.
func TestControlDrain(t *testing.T) {
	gate := make(chan struct{})
	srvs := unlimitedReplicas(t, gatedApp(gate), 2)
	rec := &recorder{}
	cfg := pool.Config{Replicas: urls(srvs), MinConnections: -1, MaxConnections: 1, OnEvent: rec.hook}
	p := newPool(t, cfg)
	a, b := p.Replicas()[0], p.Replicas()[1]

	inFlight := goPredict(p, user(0)) // new users go round robin: user 0 to a
	waitUntil(t, func() bool { return srvs[0].Snapshot().Running == 1 })
	waiting := goPredict(p, user(0)) // pinned to a: waits in a's queue
	waitUntil(t, func() bool { return p.Stats(ctxT(t)).Pools[a].QueueLength == 1 })

	if changed, err := p.SetControl(a, pool.ControlDrain); err != nil || !changed {
		t.Fatalf("SetControl(drain) = %v, %v", changed, err)
	}
	if changed, _ := p.SetControl(a, pool.ControlDrain); changed {
		t.Error("draining a drained replica again reported a change")
	}
	if got := p.Stats(ctxT(t)).Pools[a].Operator; got != pool.OperatorDraining {
		t.Errorf("operator state with a call running = %q, want draining", got)
	}
	if _, err := p.Reserve(ctxT(t), "", pool.ReserveOptions{Replica: a}); !errors.Is(err, pool.ErrHeld) {
		t.Errorf("Reserve pinned to the drained replica: %v, want ErrHeld", err)
	}
	if err := p.Reconfigure(cfg); err != nil { // a reload keeps the hold
		t.Fatal(err)
	}
	close(gate)
	if r := <-inFlight; r.err != nil || r.replica != a {
		t.Errorf("call in flight on the drained replica: %+v, want a result from %s", r, a)
	}
	if r := <-waiting; r.err != nil || r.replica != a {
		t.Errorf("call queued before the drain: %+v, want it run on %s", r, a)
	}
	for i := range 4 { // user 0 pinned to a, others, anonymous: all on b
		u := user(i)
		if i == 3 {
			u = ""
		}
		if r := <-goPredict(p, u); r.err != nil || r.replica != b {
			t.Errorf("new call of %q after the drain: %+v, want %s", u, r, b)
		}
	}
	st := p.Stats(ctxT(t))
	if got := st.Pools[a].Operator; got != pool.OperatorDrained {
		t.Errorf("operator state with nothing running = %q, want drained", got)
	}
	if got := st.Pools[b].Operator; got != pool.OperatorEnabled {
		t.Errorf("other replica's operator state = %q, want enabled", got)
	}
	if got := p.Controls(); len(got) != 1 || got[a] != pool.ControlDrain {
		t.Errorf("Controls = %v, want %s drained", got, a)
	}

	if _, err := p.SetControl(a, pool.ControlEnabled); err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for i := range 4 { // new users: round robin
		r := <-goPredict(p, user(10+i))
		if r.err != nil {
			t.Fatal(r.err)
		}
		served[r.replica] = true
	}
	if !served[a] {
		t.Errorf("enabled replica served none of 4 new users (%v)", served)
	}
	if n := rec.count(pool.EventControl, a); n != 2 {
		t.Errorf("control events of %s = %d, want 2 (drain, enable)", a, n)
	}
}

// TestControlDisableMovesWaiters: disabling a replica moves the caller
// waiting in its queue to the other replica at its turn (nothing was sent
// on the disabled one), while the call it runs finishes there.
func TestControlDisableMovesWaiters(t *testing.T) {
	gate := make(chan struct{})
	srvs := unlimitedReplicas(t, gatedApp(gate), 2)
	p := newPool(t, pool.Config{Replicas: urls(srvs), MinConnections: -1, MaxConnections: 1})
	a, b := p.Replicas()[0], p.Replicas()[1]
	inFlight := goPredict(p, user(0))
	waitUntil(t, func() bool { return srvs[0].Snapshot().Running == 1 })
	waiting := goPredict(p, user(0))
	waitUntil(t, func() bool { return p.Stats(ctxT(t)).Pools[a].QueueLength == 1 })
	if _, err := p.SetControl(a, pool.ControlDisable); err != nil {
		t.Fatal(err)
	}
	if got := p.Stats(ctxT(t)).Pools[a].Operator; got != pool.OperatorDisabled {
		t.Errorf("operator state = %q, want disabled", got)
	}
	close(gate)
	if r := <-inFlight; r.err != nil || r.replica != a {
		t.Errorf("call in flight on the disabled replica: %+v, want a result from %s", r, a)
	}
	if r := <-waiting; r.err != nil || r.replica != b {
		t.Errorf("call queued on the disabled replica: %+v, want it moved to %s", r, b)
	}
	if n := srvs[0].Executions("hold"); n != 1 {
		t.Errorf("executions on the disabled replica = %d, want 1 (the call in flight)", n)
	}
}

// TestControlRefusals: every replica held means no call runs (an
// AllReplicasFailedError wrapping ErrHeld; Ready false); an unknown name
// or control is an error.
func TestControlRefusals(t *testing.T) {
	srvs := replicas(t, 1)
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	a := p.Replicas()[0]
	if _, err := p.Predict(ctxT(t), "", "upper", "x"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, p.Ready)
	if _, err := p.SetControl(a, pool.ControlDisable); err != nil {
		t.Fatal(err)
	}
	if p.Ready() {
		t.Error("Ready with the only replica disabled")
	}
	_, err := p.Predict(ctxT(t), user(1), "upper", "x")
	var all *pool.AllReplicasFailedError
	if !errors.As(err, &all) || !errors.Is(err, pool.ErrHeld) {
		t.Errorf("call with every replica disabled: %v, want AllReplicasFailedError wrapping ErrHeld", err)
	}
	if _, err := p.SetControl("nope", pool.ControlDrain); !errors.Is(err, pool.ErrUnknownReplica) {
		t.Errorf("unknown replica: %v", err)
	}
	if _, err := p.SetControl(a, pool.Control("pause")); err == nil {
		t.Error("unknown control accepted")
	}
	if _, err := pool.ParseControl("drain "); err == nil {
		t.Error(`ParseControl("drain ") accepted`)
	}
}
