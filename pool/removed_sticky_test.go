package pool_test

import (
	"testing"

	"github.com/gradiopool/gradiopool/pool"
)

// TestRemovedReplicaStickyUserMoves: a reload removes the replica a sticky
// user's own session (gr.State) is on while that user's call runs there.
// The call finishes on the removed replica; the user's next call runs on
// another replica, never an error, and the lost state is counted
// (Stats.StateLost) and reported (EventStateLost, logged as a warning).
func TestRemovedReplicaStickyUserMoves(t *testing.T) {
	gate := make(chan struct{})
	srvs := unlimitedReplicas(t, gatedApp(gate), 2)
	a, b := srvs[0], srvs[1]
	rec := &recorder{}
	cfg := pool.Config{Replicas: []string{a.URL, b.URL}, StickySessions: true, OnEvent: rec.hook, MinConnections: -1}
	p := newPool(t, cfg)
	nameA := p.Replicas()[0]
	// Find a user pinned to A.
	u := ""
	for i := 0; i < 10 && u == ""; i++ {
		c := goPredict(p, user(i))
		waitUntil(t, func() bool { return a.Snapshot().Running+b.Snapshot().Running == 1 })
		onA := a.Snapshot().Running == 1
		gate <- struct{}{}
		if r := <-c; r.err != nil {
			t.Fatal(r.err)
		} else if onA && r.replica == nameA {
			u = user(i)
		}
		// A replica frees the call's slot only after it has sent the
		// answer: wait for that, or the next wait below sees this call.
		waitUntil(t, func() bool { return a.Snapshot().Running+b.Snapshot().Running == 0 })
	}
	if u == "" {
		t.Fatal("no user pinned to replica A in 10")
	}
	inFlight := goPredict(p, u)
	waitUntil(t, func() bool { return a.Snapshot().Running == 1 })
	cfg.Replicas = []string{b.URL}
	if err := p.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	gate <- struct{}{}
	if r := <-inFlight; r.err != nil || r.replica != nameA {
		t.Fatalf("the call in flight on the removed replica: %+v, want a result from %s", r, nameA)
	}
	next := goPredict(p, u)
	waitUntil(t, func() bool { return b.Snapshot().Running == 1 })
	close(gate)
	if r := <-next; r.err != nil || r.replica == nameA {
		t.Fatalf("the sticky user's next call: %+v, want a result from the other replica", r)
	}
	if n := p.Stats(t.Context()).StateLost; n != 1 {
		t.Errorf("Stats.StateLost = %d, want 1", n)
	}
	if n := rec.count(pool.EventStateLost, p.Replicas()[0]); n != 1 {
		t.Errorf("%d state_lost events, want 1", n)
	}
}
