package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool"
	"github.com/gradiopool/gradiopool/pool/assign"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// roundTrips counts a client's round trips: each command and each
// pipeline (a transaction too) is one.
type roundTrips struct {
	on atomic.Bool
	n  atomic.Int64
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if r.on.Load() {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if r.on.Load() {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// member is one gateway's Coordinator and assignment store, as
// gateway.Open wires them.
type member struct {
	c     *cluster.Coordinator
	store *cluster.Store
}

func newMember(t *testing.T, rdb redis.UniversalClient, cfg cluster.Config) member {
	t.Helper()
	c, err := newCoordinator(t, rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := assign.NewRedis(assign.RedisConfig{Client: rdb, Prefix: "{" + cfg.Name + "}:assign:"})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Store(shared)
	t.Cleanup(func() { s.Close() })
	return member{c: c, store: s}
}

const assignTTL = time.Hour

// call is what package pool does for one call of a known user: read the
// assignment (claim one for a new user), take a lease, refresh the
// assignment, and give the lease back when the call ends.
func (m member) call(t *testing.T, user string) {
	ctx := context.Background()
	r, ok, err := m.store.Get(ctx, user)
	if err != nil {
		t.Error(err)
		return
	}
	if !ok {
		if r, err = m.store.Claim(ctx, user, replica, assignTTL); err != nil {
			t.Error(err)
			return
		}
	}
	p, err := m.c.Acquire(ctx, r, pool.PriorityNormal)
	if err != nil {
		t.Error(err)
		return
	}
	if err := m.store.Set(ctx, user, r, assignTTL); err != nil {
		t.Error(err)
	}
	p.Release()
}

// TestRoundTripsPerCall counts the Redis round trips of calls of known
// users: at most 2 per call (the assignment read that also refreshes it,
// the acquire script; a lease freed by the previous call is reused without
// one), one alone or with several callers at once.
func TestRoundTripsPerCall(t *testing.T) {
	addr := redistest.Start(t)
	rt := &roundTrips{}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	rdb.AddHook(rt)
	t.Cleanup(func() { rdb.Close() })
	// A long TTL: no heartbeat or lease refresh (per gateway, every
	// LeaseTTL/3, not per call) falls in the count. A freed lease stays
	// idle up to PollInterval for the next call: 1 s, so that a slow run
	// (-race on a busy machine) still measures the common path of calls
	// following each other.
	m := newMember(t, rdb, cluster.Config{Name: "rt", Limit: 4, LeaseTTL: time.Minute, PollInterval: time.Second})
	const users = 50
	for i := range users { // first calls: a claim each, scripts loaded
		m.call(t, fmt.Sprint("user", i))
	}
	admin := newClient(t, addr)
	settled := func() {
		waitUntil(t, "the releases to reach Redis", func() bool {
			return admin.ZCard(context.Background(), "{rt}:sem:"+replica+":h").Val() == 0
		})
	}
	settled()
	for _, conc := range []int{1, 4} {
		const calls = 400
		rt.n.Store(0)
		rt.on.Store(true)
		var wg sync.WaitGroup
		var next atomic.Int64
		for range conc {
			wg.Go(func() {
				for i := next.Add(1); i <= calls; i = next.Add(1) {
					m.call(t, fmt.Sprint("user", i%users))
				}
			})
		}
		wg.Wait()
		settled() // the last releases, sent alone
		rt.on.Store(false)
		n := rt.n.Load()
		t.Logf("%d callers: %d round trips for %d calls (%.2f per call)", conc, n, calls, float64(n)/calls)
		// The last call's lease goes back on its own.
		if n > 2*calls+1 {
			t.Errorf("%d callers: %d round trips for %d calls, want at most 2 per call", conc, n, calls)
		}
	}
}

// TestHungRedis: a Redis that keeps its connections open but never
// answers (SIGSTOP) is noticed at the operation time-out, because the
// client's context time-outs cut socket reads (there is no read time-out
// here to save it); a user's known replica is still answered, and a call
// gets its lease on the local share.
func TestHungRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb, topo, err := cluster.NewClient("redis://"+srv.Addr+"?read_timeout=-1&write_timeout=-1", cluster.TLSFiles{})
	if err != nil || topo != cluster.Standalone {
		t.Fatal(topo, err)
	}
	t.Cleanup(func() { rdb.Close() })
	m := newMember(t, rdb, cluster.Config{Name: "hung", Limit: 4, LeaseTTL: 900 * time.Millisecond})
	ctx := context.Background()
	if err := m.store.Set(ctx, "alice", "replica-b", assignTTL); err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	defer srv.Thaw()
	type answer struct {
		v   string
		ok  bool
		err error
	}
	got := make(chan answer, 1)
	start := time.Now()
	go func() {
		v, ok, err := m.store.Get(ctx, "alice")
		got <- answer{v, ok, err}
	}()
	select {
	case a := <-got:
		if a.err != nil || !a.ok || a.v != "replica-b" {
			t.Errorf("Get during the hang = %q, %v, %v; want the known replica-b", a.v, a.ok, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get still waits for the hung Redis after 10 s")
	}
	t.Logf("a hung Redis was noticed after %v (operation time-out 300 ms)", time.Since(start))
	if m.c.RedisUp() {
		t.Error("RedisUp after a hung operation")
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := m.c.Acquire(actx, replica, pool.PriorityNormal)
	if err != nil {
		t.Fatalf("acquire on the local share: %v", err)
	}
	p.Release()
	srv.Thaw()
	waitUntil(t, "the rejoin", m.c.RedisUp)
}

// TestWriteBackAfterEmptyRestart: after Redis restarts empty, the
// assignments a gateway knows are written back at their next read, so
// that every gateway keeps the user where it was; an assignment another
// gateway made meanwhile wins, as a first claim does.
func TestWriteBackAfterEmptyRestart(t *testing.T) {
	srv := redistest.StartServer(t)
	cfg := cluster.Config{Name: "wb", Limit: 4, LeaseTTL: 600 * time.Millisecond}
	cfg.GatewayID = "g1"
	g1 := newMember(t, newClient(t, srv.Addr), cfg)
	cfg.GatewayID = "g2"
	g2 := newMember(t, newClient(t, srv.Addr), cfg)
	ctx := context.Background()
	for _, u := range []string{"alice", "bob"} {
		if _, err := g1.store.Claim(ctx, u, "replica-a", assignTTL); err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop()
	waitUntil(t, "g1 to notice", func() bool { return !g1.c.RedisUp() })
	srv.Start()
	waitUntil(t, "g1 and g2 to rejoin", func() bool { return g1.c.RedisUp() && g2.c.RedisUp() })
	// g2 sees bob first, in the empty Redis: its claim is the one that holds.
	if v, err := g2.store.Claim(ctx, "bob", "replica-c", assignTTL); err != nil || v != "replica-c" {
		t.Fatalf("g2 claims bob: %q, %v", v, err)
	}
	if v, ok, err := g1.store.Get(ctx, "alice"); err != nil || !ok || v != "replica-a" {
		t.Errorf("g1 reads alice: %q, %v, %v; want its known replica-a", v, ok, err)
	}
	if v, ok, err := g2.store.Get(ctx, "alice"); err != nil || !ok || v != "replica-a" {
		t.Errorf("g2 reads alice after g1's write-back: %q, %v, %v; want replica-a", v, ok, err)
	}
	if v, ok, err := g1.store.Get(ctx, "bob"); err != nil || !ok || v != "replica-c" {
		t.Errorf("g1 reads bob: %q, %v, %v; want g2's replica-c", v, ok, err)
	}
}

// TestEveryKeyExpires: after gateways that waited, held leases, assigned
// users and rejoined are killed (nothing removed at leave), every key
// they wrote has a TTL: nothing stays forever, per-replica keys of a
// renamed replica included.
func TestEveryKeyExpires(t *testing.T) {
	srv := redistest.StartServer(t)
	f := newInflight()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var errs atomic.Int64
	var ms []member
	for i := range 3 {
		m := newMember(t, newClient(t, srv.Addr), cluster.Config{Name: "ttl", Limit: 2, LeaseTTL: 600 * time.Millisecond,
			GatewayID: fmt.Sprint("g", i), Replicas: []string{replica, "renamed-away"}})
		ms = append(ms, m)
		load(m.c, fmt.Sprint("g", i), 4, time.Millisecond, f, stop, &errs, &wg)
		m.call(t, fmt.Sprint("user", i))
	}
	waitUntil(t, "300 grants", func() bool { _, _, _, n := f.snapshot(); return n >= 300 })
	srv.Stop() // an outage: the rejoin writes reservations too
	waitUntil(t, "the outage noticed", func() bool { return !ms[0].c.RedisUp() })
	srv.Start()
	waitUntil(t, "the rejoin", func() bool { return ms[0].c.RedisUp() && ms[1].c.RedisUp() && ms[2].c.RedisUp() })
	for i, m := range ms {
		m.call(t, fmt.Sprint("user", i))
	}
	close(stop)
	wg.Wait()
	for _, m := range ms {
		m.c.Abandon()
	}
	admin := newClient(t, srv.Addr)
	ctx := context.Background()
	keys := admin.Keys(ctx, "*").Val()
	if len(keys) == 0 {
		t.Fatal("no key in Redis: the test saw nothing")
	}
	for _, k := range keys {
		if ttl := admin.PTTL(ctx, k).Val(); ttl == -1 {
			t.Errorf("key %s has no TTL", k)
		}
	}
	t.Logf("%d keys, each with a TTL", len(keys))
}
