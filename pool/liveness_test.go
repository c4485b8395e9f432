package pool_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// TestIdleReplicaDeathSeen: a replica that dies while idle (no call in
// flight, none after) is seen by the liveness check at the default
// LivenessInterval and ProbeInterval: ejected as unreachable, not ready,
// its sessions shown as no capacity; started again on its address it is
// connected again and ready, still without a call. Without the liveness
// check it stayed "ready" until the five-minute health check.
func TestIdleReplicaDeathSeen(t *testing.T) {
	srvs := replicas(t, 2)
	rec := &recorder{}
	p := newPool(t, pool.Config{Replicas: urls(srvs), OnEvent: rec.hook, Routing: pool.RouteLeastInUse})
	name0 := p.Replicas()[0]
	ctx := ctxT(t)
	for i := range 4 {
		if _, err := p.Predict(ctx, "", "upper", "x"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	waitUntil(t, func() bool { return p.Stats(t.Context()).Pools[name0].HealthyConnections > 0 })
	addr := srvs[0].Listener.Addr().String()
	srvs[0].Close()
	killed := time.Now()
	// No call from here on.
	waitUntil(t, func() bool { return p.Stats(t.Context()).Pools[name0].State == pool.StateEjected })
	seen := time.Since(killed)
	rs := p.Stats(t.Context()).Pools[name0]
	if !rs.Unreachable {
		t.Errorf("the dead replica is ejected but not unreachable: %+v", rs)
	}
	if rs.HealthyConnections != 0 || rs.AvailableConnections != 0 {
		t.Errorf("the dead replica's sessions still shown as capacity: healthy %d, available %d", rs.HealthyConnections, rs.AvailableConnections)
	}
	if !p.Ready() {
		t.Error("the pool is not ready with one replica of two alive")
	}
	if rec.count(pool.EventEjected, name0) == 0 {
		t.Error("no ejected event for the dead replica")
	}
	restartOn(t, addr)
	restarted := time.Now()
	waitUntil(t, func() bool { return p.Stats(t.Context()).Pools[name0].State == pool.StateReady })
	t.Logf("dead idle replica ejected %v after the kill; ready %v after it listened again", seen.Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	if rec.count(pool.EventRecovered, name0) == 0 {
		t.Error("no recovered event")
	}
}

// TestLivenessOff: a negative LivenessInterval turns the check off: the
// dead idle replica is still "ready" (only the health check, five minutes
// away, or a call would see it).
func TestLivenessOff(t *testing.T) {
	srvs := replicas(t, 2)
	p := newPool(t, pool.Config{Replicas: urls(srvs), LivenessInterval: -1, Routing: pool.RouteLeastInUse})
	name0 := p.Replicas()[0]
	ctx := ctxT(t)
	for range 2 {
		if _, err := p.Predict(ctx, "", "upper", "x"); err != nil {
			t.Fatal(err)
		}
	}
	srvs[0].Close()
	// Three default intervals: the check, were it on, would have run.
	time.Sleep(3 * pool.Config{}.WithDefaults().LivenessInterval)
	if st := p.Stats(t.Context()).Pools[name0].State; st != pool.StateReady {
		t.Fatalf("with the liveness check off the dead idle replica is %q", st)
	}
}

// TestRefusedJoinNotSentIsUnreachable: a join "not sent: connection
// refused" reported through a Slot (the front door's path) is a transport
// failure, classified as a failed connect is: the replica is ejected as
// unreachable, so the prober connects it again once it listens, with no
// call. (It counted as refusals of an app that answers: ejected for a
// growing back-off, then half-open until a user's trial call, 30 s and
// more after it answered again.) The liveness check is off here, so the
// join's own classification is what is tested.
func TestRefusedJoinNotSentIsUnreachable(t *testing.T) {
	srvs := replicas(t, 2)
	p := newPool(t, pool.Config{Replicas: urls(srvs), LivenessInterval: -1})
	name0 := p.Replicas()[0]
	ctx := ctxT(t)
	var slots []*pool.Slot
	for range (pool.Config{}).WithDefaults().EjectAfterRefusals {
		s, err := p.Reserve(ctx, "", pool.ReserveOptions{Replica: name0})
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, s)
	}
	addr := srvs[0].Listener.Addr().String()
	srvs[0].Close()
	for _, s := range slots {
		app := s.App()
		req, err := app.NewRequest(ctx, http.MethodPost, app.URL("queue/join"), strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := app.Do(req, true)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("a join to the closed replica was answered %s", resp.Status)
		}
		s.Done(gradio.JoinNotAccepted, fmt.Errorf("queue/join not sent: %w", err))
	}
	rs := p.Stats(t.Context()).Pools[name0]
	if rs.State != pool.StateEjected || !rs.Unreachable {
		t.Fatalf("after %d joins not sent (connection refused) the replica is %q, unreachable %v; want ejected, unreachable", len(slots), rs.State, rs.Unreachable)
	}
	restartOn(t, addr)
	restarted := time.Now()
	waitUntil(t, func() bool { return p.Stats(t.Context()).Pools[name0].State == pool.StateReady })
	t.Logf("ready %v after it listened again, with no call", time.Since(restarted).Round(time.Millisecond))
}

// TestRefusalEjectionClosedByProbe: a replica ejected for refused joins
// (500s) whose back-off is over gets the gateway's own trial: it is ready
// again with no user call (it stayed half-open until a caller came).
func TestRefusalEjectionClosedByProbe(t *testing.T) {
	srvs := replicas(t, 2)
	rec := &recorder{}
	p := newPool(t, pool.Config{Replicas: urls(srvs), OnEvent: rec.hook, LivenessInterval: -1, Routing: pool.RouteLeastInUse})
	name0 := p.Replicas()[0]
	ctx := ctxT(t)
	if _, err := p.Predict(ctx, "", "upper", "x"); err != nil {
		t.Fatal(err)
	}
	srvs[0].FailNextJoins(1000)
	n := 0
	waitUntil(t, func() bool {
		n++
		if _, err := p.Predict(ctx, "", "upper", "x"); err != nil {
			t.Errorf("call %d: %v", n, err) // moved to replica 1
		}
		return p.Stats(t.Context()).Pools[name0].State == pool.StateEjected
	})
	if p.Stats(t.Context()).Pools[name0].Unreachable {
		t.Fatal("a replica refusing joins with 500 is marked unreachable")
	}
	srvs[0].ResetFaults()
	healed := time.Now()
	// No call from here on.
	waitUntil(t, func() bool { return p.Stats(t.Context()).Pools[name0].State == pool.StateReady })
	t.Logf("ready %v after the joins were healed, with no call", time.Since(healed).Round(time.Millisecond))
	if rec.count(pool.EventRecovered, name0) == 0 {
		t.Error("no recovered event")
	}
}
