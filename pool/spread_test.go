package pool_test

import (
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/pool"
)

// TestUsersComeBackAfterRollingRestart: three replicas restarted one
// after the other (killed, started again on their address) under 30
// signed-in users calling at the default settings: the users of each
// restarted replica move to the others, and once it is back new calls
// move users above their replica's share toward it, so that after the
// rolling restart no replica holds under half its share. Before, users
// stayed where they had moved for the assignment TTL (22/8/0).
func TestUsersComeBackAfterRollingRestart(t *testing.T) {
	srvs := replicas(t, 3)
	var mu sync.Mutex
	moves := map[string]int{} // by the reason logged
	p := newPool(t, pool.Config{Replicas: urls(srvs), OnEvent: func(e pool.Event) {
		if e.Kind == pool.EventAssigned && e.Previous != "" {
			mu.Lock()
			moves[e.Reason]++
			mu.Unlock()
		}
	}})
	names := p.Replicas()
	ctx := ctxT(t)
	const users = 30
	on := map[string]string{} // user -> replica of their last call
	round := func() map[string]int {
		t.Helper()
		for i := range users {
			res, err := p.Predict(ctx, user(i), "upper", "x")
			if lostOnClosedConn(err) {
				res, err = p.Predict(ctx, user(i), "upper", "x") // the caller tries again
			}
			if err != nil {
				t.Fatalf("user %d: %v", i, err)
			}
			on[user(i)] = res.Replica
		}
		n := map[string]int{}
		for _, r := range on {
			n[r]++
		}
		return n
	}
	t.Logf("start: %v", round())
	for i, s := range srvs {
		addr := s.Listener.Addr().String()
		s.Close()
		t.Logf("%s down: %v", names[i], round())
		restartOn(t, addr)
		waitUntil(t, func() bool { return p.Stats(t.Context()).Pools[names[i]].State == pool.StateReady })
		t.Logf("%s back: %v", names[i], round())
	}
	final := round()
	t.Logf("after the rolling restart: %v", final)
	for _, n := range names {
		if final[n] < users/len(names)/2 {
			t.Errorf("after the rolling restart %s holds %d of %d users (under half its share): %v", n, final[n], users, final)
		}
	}
	// Each move says why: off a replica that was down, or back for balance.
	mu.Lock()
	defer mu.Unlock()
	if moves["failover"] == 0 || moves["balance"] == 0 || len(moves) != 2 {
		t.Errorf("users' moves by the reason logged: %v, want some failover and some balance, nothing else", moves)
	}
}

// TestNewUsersFillEmptiestReplica: while one replica holds far fewer users
// than the others (it was down while they arrived), new users go to it.
func TestNewUsersFillEmptiestReplica(t *testing.T) {
	srvs := replicas(t, 3)
	p := newPool(t, pool.Config{Replicas: urls(srvs), StickySessions: true})
	names := p.Replicas()
	ctx := ctxT(t)
	addr := srvs[2].Listener.Addr().String()
	srvs[2].Close()
	for i := range 20 {
		if _, err := p.Predict(ctx, user(i), "upper", "x"); err != nil && !lostOnClosedConn(err) {
			t.Fatalf("user %d: %v", i, err)
		}
	}
	restartOn(t, addr)
	waitUntil(t, func() bool { return p.Stats(t.Context()).Pools[names[2]].State == pool.StateReady })
	got := map[string]int{}
	for i := 100; i < 103; i++ {
		res, err := p.Predict(ctx, user(i), "upper", "x")
		if err != nil {
			t.Fatal(err)
		}
		got[res.Replica]++
	}
	if got[names[2]] != 3 {
		t.Fatalf("3 new users while %s held none of 20: %v, want all on it", names[2], got)
	}
	// The old users hold their sticky sessions (gr.State): none moves.
	for i := range 20 {
		if _, err := p.Predict(ctx, user(i), "upper", "x"); err != nil {
			t.Fatal(err)
		}
	}
	if st := p.Stats(t.Context()).Pools[names[2]]; st.ReservedSessions != 3 {
		t.Fatalf("%s holds %d sticky sessions, want the 3 new users' (users with a session of their own do not move)", names[2], st.ReservedSessions)
	}
}
