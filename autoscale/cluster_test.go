package autoscale_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/autoscale"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// recordingHub is one gateway's Hub client that remembers its writes.
type recordingHub struct {
	autoscale.Hub
	mu     sync.Mutex
	writes []string
}

func (h *recordingHub) Pause(ctx context.Context, space string) (autoscale.Runtime, error) {
	h.mu.Lock()
	h.writes = append(h.writes, "pause "+space)
	h.mu.Unlock()
	return h.Hub.Pause(ctx, space)
}

func (h *recordingHub) Restart(ctx context.Context, space string) (autoscale.Runtime, error) {
	h.mu.Lock()
	h.writes = append(h.writes, "restart "+space)
	h.mu.Unlock()
	return h.Hub.Restart(ctx, space)
}

func (h *recordingHub) taken() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.writes...)
}

type member struct {
	ctl    *autoscale.Controller
	hub    *recordingHub
	target *fakeTarget
	shared *autoscale.RedisShared
}

// TestClusterOneGatewayActs: three gateways' controllers share one Redis
// and three emulated Spaces. Exactly one acts (the Hub writes are all
// its own) while the others apply its decisions to their pools; when it
// dies without a word (no release: its lease expires), another takes
// over with a larger fencing token and the flap budgets and parked
// states it left, and wakes Spaces for callers waiting at a third
// gateway; the dead one, resumed (a frozen process), acts no more and its
// fenced writes are refused.
func TestClusterOneGatewayActs(t *testing.T) {
	clk, hub, ms, names := newCluster(t)
	// 20 minutes of no demand, ticks of 5 s: the acting gateway parks two
	// Spaces (min_awake 1).
	for range 240 {
		tickAll(ms)
		if a := acting(ms); len(a) != 1 {
			t.Fatalf("%d gateways act", len(a))
		}
		clk.Add(5 * time.Second)
	}
	leader := acting(ms)[0]
	var others []*member
	for _, m := range ms {
		if m != leader {
			others = append(others, m)
			if w := m.hub.taken(); len(w) > 0 {
				t.Fatalf("a gateway that does not act called the Hub: %v", w)
			}
		}
	}
	if w := leader.hub.taken(); len(w) != 2 {
		t.Fatalf("acting gateway's Hub writes %v, want 2 pauses", w)
	}
	var parked []string
	for i, n := range names {
		if hub.Stage(fmt.Sprintf("o/r%d", i+1)) == gradiotest.StagePaused {
			parked = append(parked, n)
		}
	}
	if len(parked) != 2 {
		t.Fatalf("parked %v", parked)
	}
	for _, m := range ms {
		for _, n := range parked {
			if !m.target.isParked(n) {
				t.Fatalf("%s is paused but a gateway's pool still sends it calls", n)
			}
		}
	}
	old := leader.ctl.Status().Cluster.FencingToken

	// The acting gateway dies: it ticks no more and releases nothing.
	// Callers wait at another gateway; within the lease's TTL another
	// gateway acts and wakes Spaces for them.
	others[1].target.setWaiting(5)
	next := takeOver(t, others)
	if tok := next.ctl.Status().Cluster.FencingToken; tok <= old {
		t.Fatalf("fencing token %d after %d", tok, old)
	}
	if w := next.hub.taken(); len(w) != 2 || w[0][:7] != "restart" || w[1][:7] != "restart" {
		t.Fatalf("new acting gateway's Hub writes %v, want the two restarts for the callers", w)
	}
	// What the dead one left: the flap budget (a park and a wake each).
	for _, rs := range next.ctl.Status().Replicas {
		for _, n := range parked {
			if rs.Name == n && rs.ActionsHour != 2 {
				t.Errorf("%s: %d actions in the last hour after the takeover, want 2 (the dead gateway's park and this wake)", n, rs.ActionsHour)
			}
		}
	}
	// The dead one resumes (it was frozen): it does not act, and a write
	// with its old token is refused.
	leader.ctl.Tick(context.Background())
	if c := leader.ctl.Status().Cluster; c.Acting || c.Leader != next.shared.ID() {
		t.Fatalf("resumed gateway: %+v", c)
	}
	if w := leader.hub.taken(); len(w) != 2 {
		t.Fatalf("resumed gateway called the Hub again: %v", w)
	}
	if err := leader.shared.Save(context.Background(), old, nil, []autoscale.Action{{Kind: "park"}}); !errors.Is(err, autoscale.ErrFenced) {
		t.Fatalf("a write with the old token: %v, want ErrFenced", err)
	}
	// Once running, every gateway's pool takes the woken Spaces back.
	for range 30 {
		tickAll(ms)
		clk.Add(5 * time.Second)
	}
	for _, m := range ms {
		for _, n := range parked {
			if m.target.isParked(n) {
				t.Errorf("%s runs again but a gateway's pool keeps it parked", n)
			}
		}
	}
	// The log of actions is one, shared.
	st := others[0].ctl.Status()
	kinds := map[string]int{}
	for _, a := range st.Actions {
		kinds[a.Kind+" "+a.Result]++
	}
	if kinds["park ok"] != 2 || kinds["wake ok"] != 2 {
		t.Errorf("shared log %v", kinds)
	}
}

// TestClusterOverdueWakeOutlivesTakeover: the acting gateway wakes a
// Space for callers, the Space's build hangs, and the gateway dies. The
// one that takes over knows when that wake was sent (the shared state),
// so it too takes the wake for overdue at twice its expected time and
// wakes the third Space, and restarts the stuck one no second time.
func TestClusterOverdueWakeOutlivesTakeover(t *testing.T) {
	clk, hub, ms, _ := newCluster(t)
	for range 240 { // 20 min without demand: two Spaces paused
		tickAll(ms)
		clk.Add(5 * time.Second)
	}
	leader := takeOver(t, ms)
	ms[2].target.set("r1", 4, 3) // full, 3 waiting there: one more Space
	var stuck string
	for range 12 {
		tickAll(ms)
		clk.Add(5 * time.Second)
		if w := leader.hub.taken(); len(w) == 3 {
			stuck = strings.TrimPrefix(w[2], "restart ")
			break
		}
	}
	if stuck == "" {
		t.Fatalf("no wake for the callers: %v", leader.hub.taken())
	}
	hub.SetStage(stuck, gradiotest.StageBuilding) // the build hangs

	var rest []*member
	for _, m := range ms {
		if m != leader {
			rest = append(rest, m)
		}
	}
	next := takeOver(t, rest) // the leader died
	for range 60 {            // 5 min
		tickAll(rest)
		clk.Add(5 * time.Second)
	}
	w := next.hub.taken()
	if len(w) != 1 || w[0] == "restart "+stuck || !strings.HasPrefix(w[0], "restart ") {
		t.Fatalf("the new acting gateway's Hub writes %v, want one restart of the third Space (%s hangs)", w, stuck)
	}
}

// clusterLeaseTTL is the autoscale lease's TTL in the cluster tests (real
// time: Redis keeps it).
const clusterLeaseTTL = 300 * time.Millisecond

// newCluster: three gateways' controllers sharing one Redis and the three
// Spaces of threeSpaces.
func newCluster(t *testing.T) (*fakeClock, *gradiotest.Hub, []*member, []string) {
	t.Helper()
	addr := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	clk, hub, reps, names := threeSpaces(t)
	var ms []*member
	for i := range 3 {
		m := &member{target: newTarget(names...),
			hub:    &recordingHub{Hub: autoscale.NewHubClient(hub.URL, ownerTok, 0, nil, clk.Now)},
			shared: autoscale.NewRedisShared(rc, "t", fmt.Sprintf("gw%d", i), clusterLeaseTTL, time.Minute)}
		m.ctl = autoscale.New(autoscale.Config{Mode: autoscale.ModeOn}, m.hub, m.target, reps, nil, clk.Now)
		m.ctl.SetShared(m.shared)
		ms = append(ms, m)
	}
	return clk, hub, ms, names
}

// tickAll ticks every live member once.
func tickAll(live []*member) {
	for _, m := range live {
		m.ctl.Tick(context.Background())
	}
}

// acting are the members that hold the lease.
func acting(live []*member) []*member {
	var out []*member
	for _, m := range live {
		if c := m.ctl.Status().Cluster; c != nil && c.Acting {
			out = append(out, m)
		}
	}
	return out
}

// takeOver ticks the live members until one acts (the lease of a dead one
// lapses in real time), and returns it.
func takeOver(t *testing.T, live []*member) *member {
	t.Helper()
	for range 100 {
		tickAll(live)
		switch a := acting(live); len(a) {
		case 1:
			return a[0]
		case 0:
		default:
			t.Fatalf("%d gateways act", len(a))
		}
		time.Sleep(clusterLeaseTTL / 10)
	}
	t.Fatal("no gateway took over from the dead one")
	return nil
}

// TestClusterLeaseReleasedAtClose: a gateway that closes cleanly gives the
// lease up at once, and holds set at any gateway reach the acting one.
func TestClusterLeaseReleased(t *testing.T) {
	addr := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	ctx := context.Background()
	a := autoscale.NewRedisShared(rc, "t", "a", time.Hour, time.Minute)
	b := autoscale.NewRedisShared(rc, "t", "b", time.Hour, time.Minute)
	ra, err := a.Sync(ctx, autoscale.GatewayDemand{})
	if err != nil || ra.Token != 1 || !a.Acting() {
		t.Fatalf("a: %+v %v", ra, err)
	}
	rb, err := b.Sync(ctx, autoscale.GatewayDemand{Waiting: 3})
	if err != nil || rb.Token != 0 || rb.Holder != "a" || b.Acting() {
		t.Fatalf("b: %+v %v", rb, err)
	}
	if len(rb.Demand) != 2 || rb.Demand["b"].Waiting != 3 {
		t.Fatalf("demand %+v", rb.Demand)
	}
	if err := b.Release(ctx); err != nil { // not b's: nothing happens
		t.Fatal(err)
	}
	if ra, _ = a.Sync(ctx, autoscale.GatewayDemand{}); ra.Token != 1 {
		t.Fatalf("a lost its lease to b's release: %+v", ra)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rb, _ = b.Sync(ctx, autoscale.GatewayDemand{}); rb.Token != 2 || !b.Acting() {
		t.Fatalf("b after a's release: %+v", rb)
	}
	if err := a.Save(ctx, 1, map[string]autoscale.SharedReplica{"r1": {Parked: true}}, nil); !errors.Is(err, autoscale.ErrFenced) {
		t.Fatalf("a's stale save: %v", err)
	}
	if err := b.Save(ctx, 2, map[string]autoscale.SharedReplica{"r1": {Parked: true}}, []autoscale.Action{{Kind: "park"}}); err != nil {
		t.Fatal(err)
	}
	ra, _ = a.Sync(ctx, autoscale.GatewayDemand{})
	if !ra.State["r1"].Parked || len(ra.Log) != 1 {
		t.Fatalf("a reads %+v", ra)
	}
}

// TestClusterSharedUnderACLRule: the shared state works for a Redis user
// with only the cluster's documented ACL rule (pool/cluster.ACLRule).
func TestClusterSharedUnderACLRule(t *testing.T) {
	srv := redistest.StartServer(t) // a real redis-server (ACL users)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	t.Cleanup(func() { admin.Close() })
	args := []any{"ACL", "SETUSER", "gp", "on", ">pw"}
	for _, f := range strings.Fields(cluster.ACLRule("t")) {
		args = append(args, f)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "gp", Password: "pw", DisableIdentity: true})
	t.Cleanup(func() { rc.Close() })
	s := autoscale.NewRedisShared(rc, "t", "a", time.Second, time.Second)
	res, err := s.Sync(ctx, autoscale.GatewayDemand{Waiting: 1})
	if err != nil || res.Token != 1 {
		t.Fatalf("sync: %+v %v", res, err)
	}
	if err := s.Save(ctx, 1, map[string]autoscale.SharedReplica{"r": {Parked: true}}, []autoscale.Action{{Kind: "park"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHold(ctx, "r", autoscale.HoldAwake, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetHold(ctx, "r", autoscale.HoldAuto, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if res, err = s.Sync(ctx, autoscale.GatewayDemand{}); err != nil || !res.State["r"].Parked || len(res.Log) != 1 {
		t.Fatalf("sync: %+v %v", res, err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestClusterRedisLostNobodyActs: while the shared Redis does not answer,
// the gateway that acted stops acting (it cannot know it is the only
// one): it makes no Hub write, even for callers waiting on parked
// replicas, and says so; once Redis answers again one gateway acts.
func TestClusterRedisLostNobodyActs(t *testing.T) {
	srv := redistest.StartServer(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	// After failed dials go-redis runs a redial loop that checks for Close
	// once a second: let it see the Close before goleak looks (cleanups
	// run last-in first-out: the Close first, then this wait).
	t.Cleanup(func() { time.Sleep(1100 * time.Millisecond) })
	t.Cleanup(func() { rc.Close() })
	r := newRig(t, autoscale.Config{}, ownerTok)
	hub := &recordingHub{Hub: r.client}
	shared := autoscale.NewRedisShared(rc, "t", "gw", time.Second, time.Minute)
	ctl := autoscale.New(autoscale.Config{Mode: autoscale.ModeOn}, hub, r.target, []autoscale.Replica{{Name: "r1", Space: "o/r1"}, {Name: "r2", Space: "o/r2"}, {Name: "r3", Space: "o/r3"}}, nil, r.clk.Now)
	ctl.SetShared(shared)
	for range 200 { // 16 min 40 s: two Spaces paused
		ctl.Tick(context.Background())
		r.clk.Add(5 * time.Second)
	}
	if w := hub.taken(); len(w) != 2 {
		t.Fatalf("writes %v, want 2 pauses", w)
	}
	srv.Stop()
	r.target.setWaiting(9) // urgent: would wake both
	for range 10 {
		ctl.Tick(context.Background())
		r.clk.Add(5 * time.Second)
	}
	if w := hub.taken(); len(w) != 2 {
		t.Fatalf("Hub writes while Redis was lost: %v", w[2:])
	}
	if c := ctl.Status().Cluster; c == nil || c.Acting || c.RedisUp {
		t.Fatalf("status while Redis is lost: %+v", c)
	}
	srv.Start()
	for i := 0; i < 100 && len(hub.taken()) == 2; i++ {
		ctl.Tick(context.Background())
		time.Sleep(20 * time.Millisecond)
	}
	if w := hub.taken(); len(w) != 4 {
		t.Fatalf("after Redis came back: %v, want the two restarts", w)
	}
	if c := ctl.Status().Cluster; !c.Acting || !c.RedisUp {
		t.Fatalf("status after: %+v", c)
	}
}
