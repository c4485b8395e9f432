package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

func TestRoundRobinSpread(t *testing.T) {
	srvs := replicas(t, 3)
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	ctx := ctxT(t)
	first := map[int]string{}
	for i := range 30 {
		res, err := p.Predict(ctx, user(i), "upper", "x")
		if err != nil {
			t.Fatal(err)
		}
		first[i] = res.Replica
	}
	if _, each := executions(srvs, "upper"); each[0] != 10 || each[1] != 10 || each[2] != 10 {
		t.Errorf("30 new users spread %v over 3 replicas, want 10 each", each)
	}
	// Known users keep their replica, whatever the e-mail's case or spaces.
	for i := range 30 {
		u := "  " + strings.ToLower(user(i)) + " "
		res, err := p.Predict(ctx, u, "upper", "x")
		if err != nil {
			t.Fatal(err)
		}
		if res.Replica != first[i] {
			t.Errorf("user %d moved from %s to %s", i, first[i], res.Replica)
		}
	}
	if n := p.Stats(t.Context()).UserAssignments; n != 30 {
		t.Errorf("userAssignments = %d, want 30", n)
	}
}

func TestLeastLoadedAnonymous(t *testing.T) {
	srvs := replicas(t, 3)
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	ctx := ctxT(t)
	names := p.Replicas()
	// Users 0, 1, 2 are pinned round robin to replicas 0, 1, 2.
	hold := func(u int) *pool.Lease {
		l, err := p.Acquire(ctx, user(u))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l0, l1, l2 := hold(0), hold(1), hold(2)
	// Load: replica 0 has 1, replica 1 has 1, replica 2 has 1 in use.
	// Take two more on replica 0 and one more on replica 1 (known users).
	l0b, l0c, l1b := hold(0), hold(0), hold(1)
	_ = []*pool.Lease{l0, l0b, l0c, l1, l1b}
	// Loads now 3, 2, 1: anonymous goes to replica 2.
	a, err := p.Acquire(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if pool.LeaseReplica(a) != names[2] {
		t.Errorf("anonymous went to %s, want least loaded %s", pool.LeaseReplica(a), names[2])
	}
	// Loads 3, 2, 2: ties between 1 and 2 go round robin, never to 0.
	seen := map[string]int{}
	for range 4 {
		b, err := p.Acquire(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		seen[pool.LeaseReplica(b)]++
		b.Release()
	}
	if seen[names[0]] != 0 || seen[names[1]] == 0 || seen[names[2]] == 0 {
		t.Errorf("anonymous picks with loads 3,2,2: %v", seen)
	}
	a.Release()
	for _, l := range []*pool.Lease{l0, l0b, l0c, l1, l1b} {
		l.Release()
		l.Release() // twice is harmless
	}
	st := p.Stats(t.Context())
	if st.InUseConnections != 1 { // l2 still out
		t.Errorf("inUse = %d, want 1", st.InUseConnections)
	}
	l2.Release()
	if st.UserAssignments != 3 {
		t.Errorf("anonymous users must not be assigned: userAssignments = %d", st.UserAssignments)
	}
}

func TestStatsJSON(t *testing.T) {
	srvs := replicas(t, 2)
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	before, _ := json.Marshal(p.Stats(t.Context()))
	var m map[string]any
	if err := json.Unmarshal(before, &m); err != nil {
		t.Fatal(err)
	}
	if m["lastHealthCheck"] != nil || m["initialized"] != false {
		t.Errorf("before use: %s", before)
	}
	ctx := ctxT(t)
	const email = "Secret.Person@Example.com"
	if _, err := p.Predict(ctx, email, "upper", "x"); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p.Stats(t.Context()))
	if strings.Contains(strings.ToLower(string(b)), "secret.person") {
		t.Fatalf("stats contain the e-mail: %s", b)
	}
	m = nil
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"pools", "totalConnections", "availableConnections", "inUseConnections",
		"totalQueued", "userAssignments", "initialized", "healthCheckRunning", "lastHealthCheck"} {
		if _, ok := m[k]; !ok {
			t.Errorf("stats lack %q: %s", k, b)
		}
	}
	pools := m["pools"].(map[string]any)
	if len(pools) != 2 {
		t.Fatalf("pools = %v", pools)
	}
	for _, name := range p.Replicas() {
		rp, ok := pools[name].(map[string]any)
		if !ok {
			t.Fatalf("no pool %q in %s", name, b)
		}
		for _, k := range []string{"totalConnections", "availableConnections", "inUseConnections",
			"queueLength", "healthyConnections", "unhealthyConnections"} {
			if _, ok := rp[k].(float64); !ok {
				t.Errorf("pool %s lacks numeric %q", name, k)
			}
		}
	}
	if m["userAssignments"].(float64) != 1 || m["initialized"] != true {
		t.Errorf("after a call: %s", b)
	}
}

func TestReplicaNames(t *testing.T) {
	p, err := pool.New(pool.Config{Replicas: []string{
		"owner/app", "other/app", "http://user:pw@127.0.0.1:7860/", "https://x.hf.space",
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(t.Context())
	want := []string{"app", "app#2", "127.0.0.1:7860", "x.hf.space"}
	got := p.Replicas()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("names = %q, want %q", got, want)
			break
		}
	}
	b, _ := json.Marshal(p.Stats(t.Context()))
	if strings.Contains(string(b), "pw") {
		t.Errorf("stats show URL credentials: %s", b)
	}
	if _, err := pool.New(pool.Config{}); err == nil {
		t.Error("New without replicas succeeded")
	}
	if _, err := pool.New(pool.Config{Replicas: []string{"a/b", "a/b/"}}); err == nil {
		t.Error("New with duplicate replicas succeeded")
	}
}

// brokenStore fails every operation, like an unreachable Redis.
type brokenStore struct{}

var errStoreDown = errors.New("store down")

func (brokenStore) Get(context.Context, string) (string, bool, error) { return "", false, errStoreDown }
func (brokenStore) Set(context.Context, string, string, time.Duration) error {
	return errStoreDown
}
func (brokenStore) Delete(context.Context, string) error { return errStoreDown }
func (brokenStore) Len(context.Context) (int, error)     { return 0, errStoreDown }

// TestStoreDown: when the assignment store fails, calls still work (users
// are routed as new) and the failure is reported as an event.
func TestStoreDown(t *testing.T) {
	srvs := replicas(t, 2)
	rec := &recorder{}
	p := newPool(t, pool.Config{Replicas: urls(srvs), Store: brokenStore{}, OnEvent: rec.hook})
	for i := range 4 {
		if _, err := p.Predict(ctxT(t), "u@example.com", "upper", "x"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	storeErrs := 0
	for _, e := range rec.events {
		if e.Kind == pool.EventAssigned && errors.Is(e.Err, errStoreDown) {
			storeErrs++
		}
	}
	if storeErrs == 0 {
		t.Error("store failures were not reported")
	}
}
