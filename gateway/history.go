package gateway

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

// The admin history: one point every DefaultHistoryInterval, the last
// DefaultHistoryPoints of them (one hour) in a fixed ring, plus the latest
// pool events. It is what GET /api/admin/history serves and what the
// dashboard draws: every number the page shows is computed here.
const (
	DefaultHistoryInterval = 5 * time.Second
	DefaultHistoryPoints   = 720 // one hour at DefaultHistoryInterval
	// DefaultHistoryEvents is how many pool events the history keeps.
	DefaultHistoryEvents = 200
	// maxLatencySamples bounds the call durations kept per replica between
	// two points; beyond it they are sampled (reservoir), so a burst of
	// calls costs bounded memory.
	maxLatencySamples = 4096
)

// HistoryPoint is the pool at one instant, with the rates of the interval
// that ended there.
type HistoryPoint struct {
	Time   time.Time `json:"time"`
	UnixMs int64     `json:"unix_ms"`
	// Seconds is the length of the interval the rates cover.
	Seconds float64 `json:"seconds"`
	// UserAssignments is how many users are pinned to a replica: a count,
	// never who.
	UserAssignments int            `json:"user_assignments"`
	Waiting         int            `json:"waiting"`
	InUse           int            `json:"in_use"`
	CallsPerSecond  float64        `json:"calls_per_second"`
	Replicas        []ReplicaPoint `json:"replicas"`
}

// ReplicaPoint is one replica in a HistoryPoint.
type ReplicaPoint struct {
	Name string `json:"name"`
	// State is the pool's replica state (new, connecting, ready, ejected,
	// probing, half-open, suspect, closed), or "sleeping" when the replica is not ready and
	// its last error is a Space asleep (stage SLEEPING or STOPPED).
	State      string `json:"state"`
	Idle       int    `json:"idle"`
	InUse      int    `json:"in_use"`
	Connecting int    `json:"connecting"`
	Max        int    `json:"max"`
	Waiting    int    `json:"waiting"` // callers waiting for a session
	Healthy    int    `json:"healthy"`
	Unhealthy  int    `json:"unhealthy"`
	// EjectedSecondsLeft is the back-off left of an ejection;
	// PermanentFailure a connect failure retried slowly (no such Space, a
	// token refused).
	EjectedSecondsLeft float64 `json:"ejected_seconds_left,omitempty"`
	PermanentFailure   bool    `json:"permanent_failure,omitempty"`

	// Over the interval: calls submitted (attempts), failed calls,
	// failovers away from the replica, queue time-outs.
	Calls          uint64  `json:"calls"`
	Errors         uint64  `json:"errors"`
	Failovers      uint64  `json:"failovers"`
	QueueTimeouts  uint64  `json:"queue_timeouts"`
	CallsPerSecond float64 `json:"calls_per_second"`
	// ErrorRate is Errors/Calls over the interval (0 without calls).
	ErrorRate float64 `json:"error_rate"`
	// Since the pool started.
	CallsTotal  uint64 `json:"calls_total"`
	ErrorsTotal uint64 `json:"errors_total"`
	// Percentiles of the calls completed through the gateway in the
	// interval, in milliseconds: wait is the time to get a session, call the
	// whole call as its caller saw it. Null when no call completed.
	WaitP50Ms *float64 `json:"wait_p50_ms"`
	WaitP95Ms *float64 `json:"wait_p95_ms"`
	CallP50Ms *float64 `json:"call_p50_ms"`
	CallP95Ms *float64 `json:"call_p95_ms"`
	// SpaceQueue is the Space's own queue as its Gradio estimation
	// messages report it (pool.ReplicaStats.SpaceQueue, SpaceETA). Null
	// until the pool has called the replica and seen an estimation.
	SpaceQueue *SpaceQueue `json:"space_queue"`
	LastError  string      `json:"last_error,omitempty"`
}

// SpaceQueue is a replica's own Gradio queue: the calls waiting inside the
// Space and the time a new call is expected to take there.
type SpaceQueue struct {
	Size       int     `json:"size"`
	ETASeconds float64 `json:"eta_seconds"`
}

// HistoryEvent is one pool event as the dashboard lists it.
type HistoryEvent struct {
	Time    time.Time `json:"time"`
	UnixMs  int64     `json:"unix_ms"`
	Kind    string    `json:"kind"`
	Replica string    `json:"replica,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// HistoryDoc is the JSON of GET /api/admin/history.
type HistoryDoc struct {
	IntervalSeconds float64        `json:"interval_seconds"`
	Capacity        int            `json:"capacity"`
	Replicas        []string       `json:"replicas"`
	Points          []HistoryPoint `json:"points"` // oldest first
	Events          []HistoryEvent `json:"events"` // oldest first
}

// History samples a Backend into a fixed-size ring. Create it with
// newHistory; Run samples until its context ends.
type History struct {
	b        Backend
	interval time.Duration
	max      int // sessions per replica (max_connections)
	now      func() time.Time

	mu     sync.Mutex
	points []HistoryPoint // ring of cap points
	next   int            // where the next point goes
	full   bool
	events []HistoryEvent // ring
	enext  int
	efull  bool
	prev   map[string]counters
	prevAt time.Time
	lat    map[string]*latencies
	names  []string // replica names at the last sample
}

type counters struct{ calls, errors, failovers, timeouts uint64 }

// latencies are the call durations of one replica since the last point.
type latencies struct {
	seen       int
	wait, call []time.Duration
}

func newHistory(b Backend, maxConns int, interval time.Duration, points, events int) *History {
	return &History{
		b: b, interval: interval, max: maxConns, now: time.Now,
		points: make([]HistoryPoint, points),
		events: make([]HistoryEvent, events),
		prev:   map[string]counters{},
		lat:    map[string]*latencies{},
	}
}

// Run takes a point now and then every interval until ctx ends.
func (h *History) Run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	h.sample(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.sample(ctx)
		}
	}
}

// observeCall records one call ended through the gateway.
func (h *History) observeCall(c CallRecord) {
	if c.Replica == "" || c.Code != "" {
		return // the latencies are those of completed calls
	}
	replica, wait, total := c.Replica, c.Wait, c.Total
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.lat[replica]
	if l == nil {
		l = &latencies{}
		h.lat[replica] = l
	}
	l.seen++
	if len(l.wait) < maxLatencySamples {
		l.wait = append(l.wait, wait)
		l.call = append(l.call, total)
		return
	}
	if i := rand.IntN(l.seen); i < maxLatencySamples {
		l.wait[i], l.call[i] = wait, total
	}
}

// feedKinds are the pool events the dashboard lists; per-call events
// (queued, assigned, call_done) would drown them.
var feedKinds = map[pool.EventKind]bool{
	pool.EventInitialized: true, pool.EventConnected: true, pool.EventConnectFailed: true,
	pool.EventAppChanged: true, pool.EventSessionCreated: true, pool.EventSessionDestroyed: true,
	pool.EventQueueTimeout: true, pool.EventQueueFull: true, pool.EventHealthCheck: true,
	pool.EventEjected: true, pool.EventRecovered: true, pool.EventFailover: true,
}

// onPoolEvent keeps the pool events of feedKinds. It is called
// synchronously by the pool: it only appends to the ring.
func (h *History) onPoolEvent(e pool.Event) {
	if !feedKinds[e.Kind] {
		return
	}
	t := e.Time
	if t.IsZero() {
		t = h.now()
	}
	ev := HistoryEvent{Time: t.UTC(), UnixMs: t.UnixMilli(), Kind: e.Kind.String(), Replica: e.Replica, Reason: e.Reason}
	if e.Err != nil {
		ev.Error = e.Err.Error()
	}
	if e.Kind == pool.EventHealthCheck {
		ev.Reason = "ok"
		if e.Err != nil {
			ev.Reason = "failed"
		}
	}
	h.mu.Lock()
	h.events[h.enext] = ev
	h.enext = (h.enext + 1) % len(h.events)
	if h.enext == 0 {
		h.efull = true
	}
	h.mu.Unlock()
}

// historyStatsTimeout bounds one sample's Stats call (a shared assignment
// store does network I/O).
const historyStatsTimeout = 2 * time.Second

// sample appends one point to the ring.
func (h *History) sample(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, historyStatsTimeout)
	st := h.b.Stats(sctx)
	cancel()
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	secs := h.interval.Seconds()
	if !h.prevAt.IsZero() {
		secs = now.Sub(h.prevAt).Seconds()
	}
	p := HistoryPoint{Time: now.UTC(), UnixMs: now.UnixMilli(), Seconds: secs}
	p.UserAssignments, p.Waiting, p.InUse = st.UserAssignments, st.TotalQueued, st.InUseConnections
	names := st.Replicas
	if len(names) == 0 {
		for n := range st.Pools {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	h.names = names
	var calls uint64
	for _, name := range names {
		rs := st.Pools[name]
		rp := h.replicaPoint(name, rs, secs)
		calls += rp.Calls
		p.Replicas = append(p.Replicas, rp)
	}
	if secs > 0 {
		p.CallsPerSecond = float64(calls) / secs
	}
	clear(h.lat)
	h.prevAt = now
	h.points[h.next] = p
	h.next = (h.next + 1) % len(h.points)
	if h.next == 0 {
		h.full = true
	}
}

// replicaPoint turns one replica's statistics into its point. h.mu held.
func (h *History) replicaPoint(name string, rs pool.ReplicaStats, secs float64) ReplicaPoint {
	rp := ReplicaPoint{
		Name: name, State: displayState(rs), Idle: rs.AvailableConnections, InUse: rs.InUseConnections,
		Connecting: rs.Connecting, Max: h.max, Waiting: rs.QueueLength,
		Healthy: rs.HealthyConnections, Unhealthy: rs.UnhealthyConnections, LastError: rs.LastError,
		CallsTotal: rs.Calls, ErrorsTotal: rs.Errors,
		EjectedSecondsLeft: rs.EjectedSecondsLeft, PermanentFailure: rs.PermanentFailure,
	}
	if len(rs.Endpoints) > 0 { // the pool has seen the Space's own queue
		rp.SpaceQueue = &SpaceQueue{Size: rs.SpaceQueue, ETASeconds: rs.SpaceETA}
	}
	cur := counters{calls: rs.Calls, errors: rs.Errors, failovers: rs.Failovers, timeouts: rs.QueueTimeouts}
	if prev, seen := h.prev[name]; seen {
		rp.Calls = delta(cur.calls, prev.calls)
		rp.Errors = delta(cur.errors, prev.errors)
		rp.Failovers = delta(cur.failovers, prev.failovers)
		rp.QueueTimeouts = delta(cur.timeouts, prev.timeouts)
	}
	h.prev[name] = cur
	if secs > 0 {
		rp.CallsPerSecond = float64(rp.Calls) / secs
	}
	if rp.Calls > 0 {
		rp.ErrorRate = min(float64(rp.Errors)/float64(rp.Calls), 1)
	}
	if l := h.lat[name]; l != nil && len(l.call) > 0 {
		rp.WaitP50Ms, rp.WaitP95Ms = percentileMs(l.wait, 0.50), percentileMs(l.wait, 0.95)
		rp.CallP50Ms, rp.CallP95Ms = percentileMs(l.call, 0.50), percentileMs(l.call, 0.95)
	}
	return rp
}

// delta is cur-prev for a counter, 0 if it went back (a new pool).
func delta(cur, prev uint64) uint64 {
	if cur < prev {
		return 0
	}
	return cur - prev
}

// percentileMs is the nearest-rank q-quantile of d in milliseconds; it
// sorts d.
func percentileMs(d []time.Duration, q float64) *float64 {
	slices.Sort(d)
	i := int(q*float64(len(d))+0.999999) - 1 // ceil(q*n)-1
	i = max(0, min(i, len(d)-1))
	v := float64(d[i].Microseconds()) / 1000
	return &v
}

// displayState is the pool's replica state, "sleeping" for a replica kept
// out by a sleeping Space.
func displayState(rs pool.ReplicaStats) string {
	if rs.State != pool.StateReady && (strings.Contains(rs.LastError, "(stage SLEEPING") || strings.Contains(rs.LastError, "(stage STOPPED")) {
		return "sleeping"
	}
	return rs.State
}

// Doc returns the points taken after sinceMs (Unix milliseconds; 0: all)
// and the events, oldest first.
func (h *History) Doc(sinceMs int64) HistoryDoc {
	h.mu.Lock()
	defer h.mu.Unlock()
	doc := HistoryDoc{IntervalSeconds: h.interval.Seconds(), Capacity: len(h.points), Replicas: slices.Clone(h.names),
		Points: []HistoryPoint{}, Events: []HistoryEvent{}}
	each(h.points, h.next, h.full, func(p HistoryPoint) {
		if p.UnixMs > sinceMs {
			doc.Points = append(doc.Points, p)
		}
	})
	each(h.events, h.enext, h.efull, func(e HistoryEvent) { doc.Events = append(doc.Events, e) })
	return doc
}

// each visits a ring's entries oldest first.
func each[T any](ring []T, next int, full bool, f func(T)) {
	if full {
		for _, v := range ring[next:] {
			f(v)
		}
	}
	for _, v := range ring[:next] {
		f(v)
	}
}
