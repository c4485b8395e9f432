package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// statsBackend is a Backend whose only real method is Stats.
type statsBackend struct {
	mu sync.Mutex
	st pool.Stats
}

func (b *statsBackend) set(f func(*pool.Stats)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(&b.st)
}

func (b *statsBackend) Stats(context.Context) pool.Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.st
	st.Pools = map[string]pool.ReplicaStats{}
	for k, v := range b.st.Pools {
		st.Pools[k] = v
	}
	return st
}
func (b *statsBackend) Predict(context.Context, string, pool.CallOptions, string, []any) (*Result, error) {
	return nil, errors.New("not here")
}
func (b *statsBackend) Submit(context.Context, string, pool.CallOptions, string, []any) (Call, error) {
	return nil, errors.New("not here")
}
func (b *statsBackend) Gauges(context.Context) []ReplicaGauges { return nil }
func (b *statsBackend) UserTag(string) string                  { return "" }
func (b *statsBackend) Ready() bool                            { return true }

// Pool: no pool behind this backend (the front door is off).
func (b *statsBackend) Pool() *pool.Pool { return nil }

func newStatsBackend(names ...string) *statsBackend {
	b := &statsBackend{st: pool.Stats{Replicas: names, Pools: map[string]pool.ReplicaStats{}}}
	for _, n := range names {
		b.st.Pools[n] = pool.ReplicaStats{State: pool.StateReady}
	}
	return b
}

// fakeClock is an injected clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock               { return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)} }

func TestHistoryRing(t *testing.T) {
	b := newStatsBackend("a")
	clk := newClock()
	h := newHistory(b, 10, 5*time.Second, 4, 3)
	h.now = clk.now
	var times []int64
	for range 6 {
		h.sample(context.Background())
		times = append(times, clk.t.UnixMilli())
		clk.add(5 * time.Second)
	}
	doc := h.Doc("", 0)
	if doc.Capacity != 4 || doc.IntervalSeconds != 5 {
		t.Errorf("capacity %d, interval %v", doc.Capacity, doc.IntervalSeconds)
	}
	if len(doc.Points) != 4 {
		t.Fatalf("%d points, want the ring's 4", len(doc.Points))
	}
	for i, p := range doc.Points {
		if p.UnixMs != times[2+i] {
			t.Errorf("point %d at %d, want %d (oldest first, the two oldest dropped)", i, p.UnixMs, times[2+i])
		}
		if len(p.Replicas) != 1 || p.Replicas[0].Name != "a" || p.Replicas[0].Max != 10 {
			t.Errorf("point %d replicas = %+v", i, p.Replicas)
		}
	}
	if got := h.Doc("", times[3]).Points; len(got) != 2 || got[0].UnixMs != times[4] {
		t.Errorf("since the 4th point: %d points, want the 5th and 6th", len(got))
	}
	if got := h.Doc("", times[5]).Points; len(got) != 0 {
		t.Errorf("since the last point: %d points, want none", len(got))
	}
	if doc.Replicas[0] != "a" {
		t.Errorf("replicas = %v", doc.Replicas)
	}
}

func TestHistoryRates(t *testing.T) {
	b := newStatsBackend("a", "b")
	clk := newClock()
	h := newHistory(b, 10, 5*time.Second, 10, 10)
	h.now = clk.now
	h.sample(context.Background()) // baseline: no rates yet
	b.set(func(st *pool.Stats) {
		st.Pools["a"] = pool.ReplicaStats{State: pool.StateReady, Calls: 10, Errors: 2, Failovers: 1, QueueTimeouts: 3, InUseConnections: 4}
		st.UserAssignments = 7
	})
	for i := 1; i <= 100; i++ {
		h.observeCall(CallRecord{Route: routeV1, Replica: "a", Wait: time.Duration(i) * time.Millisecond, Total: time.Duration(10*i) * time.Millisecond})
	}
	clk.add(5 * time.Second)
	h.sample(context.Background())
	p := h.Doc("", 0).Points[1]
	a := p.Replicas[0]
	if a.Calls != 10 || a.CallsPerSecond != 2 || a.ErrorRate != 0.2 || a.Failovers != 1 || a.QueueTimeouts != 3 || a.CallsTotal != 10 {
		t.Errorf("replica a = %+v; want 10 calls, 2/s, error rate 0.2, 1 failover, 3 time-outs", a)
	}
	if p.CallsPerSecond != 2 || p.UserAssignments != 7 || p.Seconds != 5 {
		t.Errorf("point = calls/s %v, users %d, seconds %v", p.CallsPerSecond, p.UserAssignments, p.Seconds)
	}
	if a.WaitP50Ms == nil || *a.WaitP50Ms != 50 || *a.WaitP95Ms != 95 || *a.CallP50Ms != 500 || *a.CallP95Ms != 950 {
		t.Errorf("percentiles = %v %v %v %v; want 50 95 500 950", fp(a.WaitP50Ms), fp(a.WaitP95Ms), fp(a.CallP50Ms), fp(a.CallP95Ms))
	}
	if bp := p.Replicas[1]; bp.Calls != 0 || bp.ErrorRate != 0 || bp.WaitP50Ms != nil {
		t.Errorf("idle replica b = %+v", bp)
	}
	// The next interval starts afresh; a counter that went back (a new
	// pool) gives 0, not a huge number.
	b.set(func(st *pool.Stats) { st.Pools["a"] = pool.ReplicaStats{State: pool.StateReady, Calls: 3} })
	clk.add(5 * time.Second)
	h.sample(context.Background())
	a = h.Doc("", 0).Points[2].Replicas[0]
	if a.Calls != 0 || a.WaitP50Ms != nil {
		t.Errorf("after a reset: %+v", a)
	}
	// JSON: a missing percentile is null, the Space queue too (until the
	// pool reports it).
	raw, _ := json.Marshal(a)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if v, ok := m["wait_p95_ms"]; !ok || v != nil {
		t.Errorf("wait_p95_ms = %v, want null", v)
	}
	if v, ok := m["space_queue"]; !ok || v != nil {
		t.Errorf("space_queue = %v, want null", v)
	}
}

// TestHistorySpaceQueue: once the pool has seen a Space's estimation
// messages, its queue and ETA are in the replica's point.
func TestHistorySpaceQueue(t *testing.T) {
	b := newStatsBackend("a", "b")
	h := newHistory(b, 10, 5*time.Second, 10, 10)
	b.set(func(st *pool.Stats) {
		st.Pools["a"] = pool.ReplicaStats{State: pool.StateReady, SpaceQueue: 4, SpaceETA: 2.5,
			Endpoints: map[string]pool.EndpointLoad{"upper": {SpaceQueue: 4}}}
	})
	h.sample(context.Background())
	p := h.Doc("", 0).Points[0]
	if q := p.Replicas[0].SpaceQueue; q == nil || q.Size != 4 || q.ETASeconds != 2.5 {
		t.Errorf("replica a space_queue = %+v, want size 4, eta 2.5", q)
	}
	if q := p.Replicas[1].SpaceQueue; q != nil {
		t.Errorf("replica b, never called, space_queue = %+v, want null", q)
	}
}

func fp(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestHistoryLatencySamplesBounded(t *testing.T) {
	h := newHistory(newStatsBackend("a"), 10, time.Second, 2, 2)
	for i := range 3 * maxLatencySamples {
		h.observeCall(CallRecord{Route: routeV1, Replica: "a", Wait: time.Duration(i), Total: time.Duration(i)})
	}
	if l := h.lat["a"]; len(l.wait) != maxLatencySamples || l.seen != 3*maxLatencySamples {
		t.Errorf("kept %d of %d samples, want %d", len(l.wait), l.seen, maxLatencySamples)
	}
}

func TestHistoryEvents(t *testing.T) {
	clk := newClock()
	h := newHistory(newStatsBackend("a"), 10, time.Second, 2, 3)
	h.now = clk.now
	h.onPoolEvent(pool.Event{Kind: pool.EventQueued, Replica: "a"})   // not listed
	h.onPoolEvent(pool.Event{Kind: pool.EventCallDone, Replica: "a"}) // not listed
	h.onPoolEvent(pool.Event{Kind: pool.EventSessionCreated, Replica: "a"})
	h.onPoolEvent(pool.Event{Kind: pool.EventHealthCheck, Replica: "a", Err: errors.New("ping failed")})
	h.onPoolEvent(pool.Event{Kind: pool.EventEjected, Replica: "a", Err: errors.New("down")})
	h.onPoolEvent(pool.Event{Kind: pool.EventFailover, Replica: "a"})
	evs := h.Doc("", 0).Events
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	want := []string{"health_check", "ejected", "failover"}
	if len(kinds) != 3 || kinds[0] != want[0] || kinds[1] != want[1] || kinds[2] != want[2] {
		t.Fatalf("events = %v, want %v (the ring's last 3, oldest first)", kinds, want)
	}
	if evs[0].Reason != "failed" || evs[1].Error != "down" {
		t.Errorf("events = %+v", evs)
	}
}

func TestDisplayState(t *testing.T) {
	for _, tt := range []struct {
		rs   pool.ReplicaStats
		want string
	}{
		{pool.ReplicaStats{State: pool.StateReady}, "ready"},
		{pool.ReplicaStats{State: pool.StateEjected, LastError: "x"}, "ejected"},
		{pool.ReplicaStats{State: pool.StateEjected, LastError: (&gradio.SpaceError{Space: "o/s", Stage: "SLEEPING"}).Error()}, "sleeping"},
		{pool.ReplicaStats{State: pool.StateReady, LastError: "gradio: space o/s is not running (stage SLEEPING)"}, "ready"},
	} {
		if got := displayState(tt.rs); got != tt.want {
			t.Errorf("displayState(%+v) = %q, want %q", tt.rs, got, tt.want)
		}
	}
}

// TestHistoryRunHour runs the sampler for two hours of fake time: the
// ring holds the last hour, one point every interval.
func TestHistoryRunHour(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newStatsBackend("a")
		h := newHistory(b, 10, defaultHistoryInterval, defaultHistoryPoints, 10)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); h.Run(ctx) }()
		time.Sleep(2*time.Hour + time.Second)
		synctest.Wait()
		cancel()
		<-done
		pts := h.Doc("", 0).Points
		if len(pts) != defaultHistoryPoints {
			t.Fatalf("%d points, want %d", len(pts), defaultHistoryPoints)
		}
		for i := 1; i < len(pts); i++ {
			if d := pts[i].Time.Sub(pts[i-1].Time); d != defaultHistoryInterval {
				t.Fatalf("points %d and %d are %v apart, want %v", i-1, i, d, defaultHistoryInterval)
			}
		}
		if span := pts[len(pts)-1].Time.Sub(pts[0].Time); span != time.Hour-defaultHistoryInterval {
			t.Errorf("the ring spans %v, want an hour", span)
		}
		if now := time.Now(); now.Sub(pts[len(pts)-1].Time) > defaultHistoryInterval {
			t.Errorf("the last point is %v old", now.Sub(pts[len(pts)-1].Time))
		}
	})
}

// TestHistoryAppErrorsApart: the app's own errors (gr.Error) have their
// own rate and total; the replica's error rate counts only its failures.
func TestHistoryAppErrorsApart(t *testing.T) {
	b := newStatsBackend("a")
	h := newHistory(b, 10, 5*time.Second, 10, 10)
	clk := newClock()
	h.now = clk.now
	h.sample(context.Background())
	b.set(func(st *pool.Stats) {
		st.Pools["a"] = pool.ReplicaStats{State: pool.StateReady, Calls: 10, Errors: 1, AppErrors: 4, Failovers: 2}
	})
	clk.add(5 * time.Second)
	h.sample(context.Background())
	a := h.Doc("", 0).Points[1].Replicas[0]
	if a.ErrorRate != 0.1 || a.AppErrorRate != 0.4 || a.AppErrors != 4 || a.AppErrorsTotal != 4 || a.Errors != 1 {
		t.Errorf("replica a = %+v; want error rate 0.1, app error rate 0.4 (4 app errors)", a)
	}
	if a.Failovers != 2 || a.FailoversTotal != 2 {
		t.Errorf("failovers %d, total %d; want 2, 2", a.Failovers, a.FailoversTotal)
	}
}

// TestHistoryEjectionsPerReplica: ejections are counted per replica, per
// interval and in total, from the pool's events.
func TestHistoryEjectionsPerReplica(t *testing.T) {
	b := newStatsBackend("a", "b")
	h := newHistory(b, 10, 5*time.Second, 10, 10)
	h.sample(context.Background())
	for range 2 {
		h.onPoolEvent(pool.Event{Kind: pool.EventEjected, Replica: "b", Err: errors.New("down")})
	}
	h.sample(context.Background())
	h.onPoolEvent(pool.Event{Kind: pool.EventEjected, Replica: "b"})
	h.sample(context.Background())
	pts := h.Doc("", 0).Points
	if a, b := pts[1].Replicas[0], pts[1].Replicas[1]; a.Ejections != 0 || b.Ejections != 2 || b.EjectionsTotal != 2 {
		t.Errorf("second point: a %d ejections, b %d (total %d); want 0, 2 (2)", a.Ejections, b.Ejections, b.EjectionsTotal)
	}
	if b := pts[2].Replicas[1]; b.Ejections != 1 || b.EjectionsTotal != 3 {
		t.Errorf("third point: b %d ejections (total %d); want 1 (3)", b.Ejections, b.EjectionsTotal)
	}
}

// TestHistoryLifeBounded samples for long: the since-start series keeps
// at most its capacity, still starts at the first interval, and loses no
// call in its merges; the resolution follows.
func TestHistoryLifeBounded(t *testing.T) {
	b := newStatsBackend("a")
	clk := newClock()
	h := newHistory(b, 10, 5*time.Second, 4, 10)
	h.now = clk.now
	h.lifeCap = 8
	const samples = 1000
	for i := range samples {
		clk.add(5 * time.Second)
		b.set(func(st *pool.Stats) {
			st.Pools["a"] = pool.ReplicaStats{State: pool.StateReady, Calls: uint64(3 * i), InUseConnections: i % 7}
		})
		h.sample(context.Background())
		if len(h.life) > h.lifeCap || cap(h.life) > 2*h.lifeCap {
			t.Fatalf("sample %d: life holds %d points (cap %d), want at most %d", i, len(h.life), cap(h.life), h.lifeCap)
		}
	}
	doc := h.Doc(windowLife, 0)
	if doc.Window != windowLife || doc.Capacity != 8 || len(doc.Points) == 0 || len(doc.Points) > 8+1 { // + the partial one
		t.Fatalf("life doc: window %q, capacity %d, %d points", doc.Window, doc.Capacity, len(doc.Points))
	}
	// 1000 intervals in at most 8 points: 128 intervals a point.
	if doc.ResolutionSeconds != 5*128 || doc.Epoch != 7 {
		t.Errorf("resolution %v s, epoch %d; want 640 s, 7", doc.ResolutionSeconds, doc.Epoch)
	}
	// The newest intervals, fewer than a point's 128, come as a partial
	// point after the whole ones.
	if last := doc.Points[len(doc.Points)-1]; !last.Partial || last.Seconds != float64(samples-(len(doc.Points)-1)*128)*5 {
		t.Errorf("last life point: partial %v over %v s, want the %d intervals past the whole points", last.Partial, last.Seconds, samples-(len(doc.Points)-1)*128)
	}
	if since := doc.Points[len(doc.Points)-2].UnixMs; len(h.Doc(windowLife, since).Points) != 1 {
		t.Errorf("since the last whole point: want only the partial one")
	}
	doc.Points = doc.Points[:len(doc.Points)-1]
	var calls uint64
	var secs float64
	maxInUse := 0
	for _, p := range doc.Points {
		if p.Partial {
			t.Errorf("a whole point is marked partial: %+v", p.Time)
		}
		calls += p.Replicas[0].Calls
		secs += p.Seconds
		maxInUse = max(maxInUse, p.Replicas[0].InUse)
	}
	// Calls are counted from the second sample; the first point starts
	// with the first sample.
	covered := len(doc.Points) * 128
	if want := uint64(3 * (covered - 1)); calls != want {
		t.Errorf("the life series counts %d calls over %d intervals, want %d (none lost in merges)", calls, covered, want)
	}
	if secs != float64(covered)*5 {
		t.Errorf("the life series covers %v s, want %v", secs, covered*5)
	}
	if maxInUse != 6 {
		t.Errorf("peak in use %d, want 6 (merges keep the peak)", maxInUse)
	}
	if first := doc.Points[0]; first.Time.Sub(newClock().t) != 128*5*time.Second {
		t.Errorf("the first point ends %v after the start, want its 128 intervals", first.Time.Sub(newClock().t))
	}
	if recent := h.Doc("", 0); len(recent.Points) != 4 || recent.ResolutionSeconds != 5 {
		t.Errorf("recent: %d points at %v s", len(recent.Points), recent.ResolutionSeconds)
	}
}

// TestHistoryEndpoints: the per-endpoint table counts calls, failures and
// app errors apart, gives p50/p95 of the successful calls, and is bounded.
func TestHistoryEndpoints(t *testing.T) {
	h := newHistory(newStatsBackend("a"), 10, time.Second, 2, 2)
	for i := 1; i <= 1000; i++ {
		h.observeCall(CallRecord{Route: routeV1, Replica: "a", Endpoint: "upper", Total: time.Duration(i) * time.Millisecond})
	}
	h.observeCall(CallRecord{Route: routeFrontDoor, Replica: "a", Endpoint: "fail", Code: codeAppError, Total: time.Second})
	h.observeCall(CallRecord{Route: routeCall, Endpoint: "fail", Code: "queue_timeout", Total: time.Minute})
	rows := h.Doc("", 0).Endpoints
	if len(rows) != 2 || rows[0].Endpoint != "fail" || rows[1].Endpoint != "upper" {
		t.Fatalf("endpoints = %+v", rows)
	}
	if f := rows[0]; f.Calls != 2 || f.Errors != 1 || f.AppErrors != 1 || f.ErrorRate != 0.5 || f.P50Ms != nil {
		t.Errorf("fail = %+v; want 2 calls, 1 error, 1 app error, no percentile", f)
	}
	u := rows[1]
	if u.Calls != 1000 || u.Errors != 0 || u.P50Ms == nil || u.P95Ms == nil {
		t.Fatalf("upper = %+v", u)
	}
	for _, c := range []struct {
		got  float64
		want float64
	}{{*u.P50Ms, 500}, {*u.P95Ms, 950}} {
		if c.got < c.want*0.975 || c.got > c.want*1.025 {
			t.Errorf("percentile %v ms, want %v within 2.5 %%", c.got, c.want)
		}
	}
	// Past the bound, further endpoints share one row.
	for i := range 3 * maxHistoryEndpoints {
		h.observeCall(CallRecord{Route: routeV1, Replica: "a", Endpoint: fmt.Sprintf("e%d", i), Total: time.Millisecond})
	}
	h.observeCall(CallRecord{Route: routeV1, Replica: "a", Endpoint: "upper", Total: 10 * time.Hour}) // past the buckets
	rows = h.Doc("", 0).Endpoints
	if len(rows) != maxHistoryEndpoints+1 {
		t.Fatalf("%d endpoint rows, want %d and %q", len(rows), maxHistoryEndpoints, otherEndpoint)
	}
	i := slices.IndexFunc(rows, func(r EndpointRow) bool { return r.Endpoint == otherEndpoint })
	if i < 0 || rows[i].Calls != 3*maxHistoryEndpoints-(maxHistoryEndpoints-2) {
		t.Errorf("other row = %+v", rows[i])
	}
}

// TestHistoryEventCounts: routine events (sessions created and destroyed,
// passed health checks) are counted per replica, not listed; the counts
// are bounded.
func TestHistoryEventCounts(t *testing.T) {
	h := newHistory(newStatsBackend("a"), 10, time.Second, 2, 50)
	for range 30 {
		h.onPoolEvent(pool.Event{Kind: pool.EventSessionCreated, Replica: "a"})
		h.onPoolEvent(pool.Event{Kind: pool.EventHealthCheck, Replica: "a"})
	}
	h.onPoolEvent(pool.Event{Kind: pool.EventSessionDestroyed, Replica: "b", Reason: "idle"})
	h.onPoolEvent(pool.Event{Kind: pool.EventHealthCheck, Replica: "b", Err: errors.New("ping failed")})
	h.onPoolEvent(pool.Event{Kind: pool.EventFailover, Replica: "a"})
	doc := h.Doc("", 0)
	if len(doc.Events) != 2 || doc.Events[0].Kind != "health_check" || doc.Events[0].Replica != "b" || doc.Events[1].Kind != "failover" {
		t.Errorf("listed events = %+v; want the failed check and the failover only", doc.Events)
	}
	want := map[string]map[string]uint64{
		"a": {"session_created": 30, "health_check": 30, "failover": 1},
		"b": {"session_destroyed": 1, "health_check": 1},
	}
	if !reflect.DeepEqual(doc.EventCounts, want) {
		t.Errorf("event counts = %v, want %v", doc.EventCounts, want)
	}
	for i := range 2 * maxCountedReplicas {
		h.onPoolEvent(pool.Event{Kind: pool.EventSessionCreated, Replica: fmt.Sprintf("r%d", i)})
	}
	if n := len(h.counts); n != maxCountedReplicas+1 {
		t.Errorf("counts for %d replicas, want %d and %q", n, maxCountedReplicas, otherEndpoint)
	}
}

// TestHistoryShowsOnlyCurrentState: the dashboard's point tells a serving
// replica from one whose sessions are only held (ejected, or drained by an
// operator), and shows a replica's error, with its time, only while the
// replica is not ready: a recovered replica's old error is not its state.
func TestHistoryShowsOnlyCurrentState(t *testing.T) {
	b := newStatsBackend("a", "b", "c")
	h := newHistory(b, 10, 5*time.Second, 10, 10)
	failed := time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)
	b.set(func(st *pool.Stats) {
		st.Pools["a"] = pool.ReplicaStats{State: pool.StateEjected, HealthyConnections: 5, LastError: "refused", LastErrorAt: &failed, Operator: pool.OperatorEnabled}
		st.Pools["b"] = pool.ReplicaStats{State: pool.StateReady, HealthyConnections: 5, LastError: "old refusal", LastErrorAt: &failed, Operator: pool.OperatorEnabled}
		st.Pools["c"] = pool.ReplicaStats{State: pool.StateReady, HealthyConnections: 5, Operator: pool.OperatorDrained}
	})
	h.sample(context.Background())
	rs := h.Doc("", 0).Points[0].Replicas
	if a := rs[0]; a.Serving || a.LastError != "refused" || a.LastErrorUnixMs != failed.UnixMilli() {
		t.Errorf("ejected replica: serving %v, error %q at %d; want not serving, its error and time", a.Serving, a.LastError, a.LastErrorUnixMs)
	}
	if b := rs[1]; !b.Serving || b.LastError != "" || b.LastErrorUnixMs != 0 {
		t.Errorf("recovered replica: serving %v, error %q; want serving, no error", b.Serving, b.LastError)
	}
	if c := rs[2]; c.Serving || c.Operator != pool.OperatorDrained {
		t.Errorf("drained replica: serving %v, operator %q; want not serving, drained", c.Serving, c.Operator)
	}
}
