package gateway

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/autoscale"
	"github.com/gradiopool/gradiopool/internal/version"
	"github.com/gradiopool/gradiopool/pool"
)

// The admin history: one point every defaultHistoryInterval, the last
// defaultHistoryPoints of them (one hour) in a fixed ring; the whole life
// of the gateway in at most defaultLifePoints points (pairs are merged
// when it is full, so its resolution halves instead of its start moving);
// the latest pool events, counts of every event kind per replica, and
// per-endpoint totals. It is what GET /api/admin/history serves and what
// the dashboard draws: every number the page shows is computed here.
const (
	defaultHistoryInterval = 5 * time.Second
	defaultHistoryPoints   = 720 // one hour at defaultHistoryInterval
	// defaultLifePoints bounds the since-start series; an even number.
	defaultLifePoints = 720
	// defaultHistoryEvents is how many pool events the history keeps.
	defaultHistoryEvents = 200
	// maxHistoryEndpoints bounds the per-endpoint table; the calls of
	// further endpoints are counted under otherEndpoint. The metrics'
	// endpoint label is bounded already; this is the history's own bound.
	maxHistoryEndpoints = 64
	// maxCountedReplicas bounds the per-replica event counts (replica
	// names come from the configuration, so this is only a safety net).
	maxCountedReplicas = 256
	// maxLatencySamples bounds the call durations kept per replica between
	// two points; beyond it they are sampled (reservoir), so a burst of
	// calls costs bounded memory.
	maxLatencySamples = 4096
)

// HistoryPoint is the pool at one instant, with the rates of the interval
// that ended there. In the since-start series a point may stand for
// several intervals merged: counts are summed over them, rates recomputed,
// gauges and percentiles are the highest of them (the peak is what an
// operator looks for in a long view).
type HistoryPoint struct {
	Time   time.Time `json:"time"`
	UnixMs int64     `json:"unix_ms"`
	// Seconds is the length of the interval the rates cover.
	Seconds float64 `json:"seconds"`
	// UserAssignments is how many users are pinned to a replica: a count,
	// never who.
	UserAssignments int     `json:"user_assignments"`
	Waiting         int     `json:"waiting"`
	InUse           int     `json:"in_use"`
	CallsPerSecond  float64 `json:"calls_per_second"`
	// CostPerHour is the autoscale policy's estimate of what the replicas'
	// Spaces bill per hour now (GET /api/admin/autoscale's
	// estimatedCostPerHour); absent while autoscale.mode is off. Merged
	// points carry the mean over their intervals.
	CostPerHour *float64       `json:"cost_per_hour,omitempty"`
	Replicas    []ReplicaPoint `json:"replicas"`
	// Partial marks the last point of the since-start series while it
	// gathers fewer intervals than its resolution: a poller replaces it
	// by the next answer's points (since stays at the last whole point).
	Partial bool `json:"partial,omitempty"`
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
	// Serving: the replica takes calls (ready, or half-open on trial, and
	// no operator hold). Otherwise its open sessions are held, not
	// serving, whatever their own health checks said.
	Serving bool `json:"serving"`
	// Operator is the operator's control (enabled, draining, drained,
	// disabled; POST /api/admin/replicas/{name}/{action}).
	Operator string `json:"operator,omitempty"`
	// With autoscale.mode on or dry_run: the Space's stage as the policy
	// last read it (RUNNING, PAUSED, BUILDING, ...), the policy's state
	// of the replica (awake, waking, draining, parked, unmanaged) and
	// why, and what it bills per hour now (the mean over a merged
	// point's intervals).
	Stage          string   `json:"stage,omitempty"`
	AutoscaleState string   `json:"autoscale_state,omitempty"`
	AutoscaleWhy   string   `json:"autoscale_why,omitempty"`
	CostPerHour    *float64 `json:"cost_per_hour,omitempty"`

	// Over the interval: calls submitted (attempts), calls failed by the
	// replica or the pool, calls the app answered with its own error
	// (gr.Error: the replica worked), failovers away from the replica,
	// ejections, queue time-outs.
	Calls          uint64  `json:"calls"`
	Errors         uint64  `json:"errors"`
	AppErrors      uint64  `json:"app_errors"`
	Failovers      uint64  `json:"failovers"`
	Ejections      uint64  `json:"ejections"`
	QueueTimeouts  uint64  `json:"queue_timeouts"`
	CallsPerSecond float64 `json:"calls_per_second"`
	// ErrorRate is Errors/Calls over the interval (0 without calls): the
	// replica's failures. AppErrorRate is AppErrors/Calls: the app's own
	// answers to bad input, not a sign of a sick replica.
	ErrorRate    float64 `json:"error_rate"`
	AppErrorRate float64 `json:"app_error_rate"`
	// Since the gateway started.
	CallsTotal     uint64 `json:"calls_total"`
	ErrorsTotal    uint64 `json:"errors_total"`
	AppErrorsTotal uint64 `json:"app_errors_total"`
	FailoversTotal uint64 `json:"failovers_total"`
	EjectionsTotal uint64 `json:"ejections_total"`
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
	// LastError is the replica's failure while it is current: set only
	// while the replica is not ready (the pool keeps the last one after a
	// recovery); LastErrorUnixMs is when it began.
	LastError       string `json:"last_error,omitempty"`
	LastErrorUnixMs int64  `json:"last_error_unix_ms,omitempty"`
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

// EndpointRow is one endpoint of the per-endpoint table, since the
// gateway started, whatever door its calls came in by.
type EndpointRow struct {
	// Endpoint is the API name (bounded like the metrics' endpoint label:
	// the app's names, capped; the rest is "other").
	Endpoint  string  `json:"endpoint"`
	Calls     uint64  `json:"calls"`      // ended calls
	Errors    uint64  `json:"errors"`     // failed by the gateway, the pool or a replica
	AppErrors uint64  `json:"app_errors"` // answered by the app with its own error
	ErrorRate float64 `json:"error_rate"` // Errors/Calls
	// Call time of the successful calls as their callers saw it, in
	// milliseconds (within 2.5 % of the true value); null before the first.
	P50Ms *float64 `json:"p50_ms"`
	P95Ms *float64 `json:"p95_ms"`
}

// History windows (GET /api/admin/history?window=).
const (
	windowRecent = "recent" // the last defaultHistoryPoints intervals, at full resolution
	windowLife   = "life"   // since the gateway started, at most defaultLifePoints points
)

// HistoryDoc is the JSON of GET /api/admin/history.
type HistoryDoc struct {
	// Version is the build (gradiopool version); StartedUnixMs when this
	// gateway's history began, UptimeSeconds how long ago that is.
	Version       string  `json:"version"`
	StartedUnixMs int64   `json:"started_unix_ms"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	// Window is the series of Points (windowRecent or windowLife);
	// ResolutionSeconds the time between two of its points. Epoch changes
	// whenever the life series merges its points: a client polling with
	// since must then fetch it again from 0.
	Window            string         `json:"window"`
	ResolutionSeconds float64        `json:"resolution_seconds"`
	Epoch             int            `json:"epoch"`
	IntervalSeconds   float64        `json:"interval_seconds"`
	Capacity          int            `json:"capacity"`
	Replicas          []string       `json:"replicas"`
	Points            []HistoryPoint `json:"points"` // oldest first
	// Events are the latest listed pool events, oldest first. Frequent,
	// routine ones (sessions created and destroyed, passed health checks)
	// are not listed, only counted in EventCounts: replica ("" for none)
	// → event kind → count since the start.
	Events      []HistoryEvent               `json:"events"`
	EventCounts map[string]map[string]uint64 `json:"event_counts"`
	Endpoints   []EndpointRow                `json:"endpoints"` // by name
}

// History samples a Backend into fixed-size rings. Create it with
// newHistory; Run samples until its context ends.
type History struct {
	b Backend
	// autoscale, when set, is the policy's status (autoscale.mode not
	// off): each point carries its stages, states and cost.
	autoscale func() autoscale.Status
	interval  time.Duration
	max       atomic.Int64 // sessions per replica (max_connections); a reload changes it
	now       func() time.Time
	started   time.Time
	version   string

	mu     sync.Mutex
	points []HistoryPoint // ring of cap points
	next   int            // where the next point goes
	full   bool
	// life is the since-start series: at most lifeCap points of stride
	// intervals each; pending gathers the intervals of the next one.
	life     []HistoryPoint
	lifeCap  int
	stride   int
	pending  HistoryPoint
	pendingN int
	epoch    int
	events   []HistoryEvent // ring
	enext    int
	efull    bool
	counts   map[string]map[string]uint64 // replica → kind → events
	prev     map[string]counters
	prevAt   time.Time
	lat      map[string]*latencies
	names    []string // replica names at the last sample
	eps      map[string]*endpointStats
}

type counters struct{ calls, errors, appErrors, failovers, timeouts, ejections uint64 }

// latencies are the call durations of one replica since the last point.
type latencies struct {
	seen       int
	wait, call []time.Duration
}

// endpointStats are one endpoint's totals since the start.
type endpointStats struct {
	calls, errors, appErrors uint64
	dur                      logHistogram
}

func newHistory(b Backend, maxConns int, interval time.Duration, points, events int) *History {
	h := &History{
		b: b, interval: interval, now: time.Now, started: time.Now(),
		version: version.Get().Version,
		points:  make([]HistoryPoint, points),
		lifeCap: defaultLifePoints, stride: 1,
		events: make([]HistoryEvent, events),
		counts: map[string]map[string]uint64{},
		prev:   map[string]counters{},
		lat:    map[string]*latencies{},
		eps:    map[string]*endpointStats{},
	}
	h.max.Store(int64(maxConns))
	return h
}

// setMax sets the sessions per replica shown from the next point on (a
// reload changed max_connections).
func (h *History) setMax(n int) {
	if h != nil {
		h.max.Store(int64(n))
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

// otherEndpoint gathers the endpoints beyond maxHistoryEndpoints.
const otherEndpoint = "other"

// observeCall records one call ended through the gateway.
func (h *History) observeCall(c CallRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.countEndpoint(c)
	if c.Replica == "" || c.Code != "" {
		return // the latencies are those of completed calls
	}
	replica, wait, total := c.Replica, c.Wait, c.Total
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

// countEndpoint adds c to its endpoint's row. h.mu held.
func (h *History) countEndpoint(c CallRecord) {
	name := c.Endpoint
	if name == "" {
		name = "(none)"
	}
	e := h.eps[name]
	if e == nil {
		if len(h.eps) >= maxHistoryEndpoints {
			name = otherEndpoint
			e = h.eps[name]
		}
		if e == nil {
			e = &endpointStats{}
			h.eps[name] = e
		}
	}
	e.calls++
	switch c.Result() {
	case resultOK:
		e.dur.add(c.Total)
	case resultAppError:
		e.appErrors++
	default:
		e.errors++
	}
}

// feedKinds are the pool events the dashboard lists (true) or only counts
// (false); per-call events (queued, assigned, call_done) are neither.
var feedKinds = map[pool.EventKind]bool{
	pool.EventInitialized: true, pool.EventConnected: true, pool.EventConnectFailed: true,
	pool.EventAppChanged: true, pool.EventSessionCreated: false, pool.EventSessionDestroyed: false,
	pool.EventQueueTimeout: true, pool.EventQueueFull: true, pool.EventHealthCheck: true,
	pool.EventEjected: true, pool.EventRecovered: true, pool.EventFailover: true,
	pool.EventSuspect: true, pool.EventProbePassed: true, pool.EventConcurrencyLimited: true, pool.EventStateLost: false, // one per user: counted
	pool.EventControl: true,
}

// onPoolEvent counts the pool events of feedKinds and keeps those listed.
// It is called synchronously by the pool: it only counts and appends to
// the ring.
func (h *History) onPoolEvent(e pool.Event) {
	listed, ok := feedKinds[e.Kind]
	if !ok {
		return
	}
	if e.Kind == pool.EventHealthCheck && e.Err == nil {
		listed = false // a passed check is routine: counted only
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count(e.Replica, e.Kind.String())
	if !listed {
		return
	}
	reason := e.Reason
	if e.Kind == pool.EventHealthCheck {
		reason = "failed"
	}
	h.addEvent(e.Time, e.Kind.String(), e.Replica, reason, e.Err)
}

// note lists an event of the gateway itself (a reload) beside the pool's.
func (h *History) note(kind, replica, reason string, err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.count(replica, kind)
	h.addEvent(time.Time{}, kind, replica, reason, err)
}

// addEvent appends one event to the ring. h.mu held.
func (h *History) addEvent(t time.Time, kind, replica, reason string, err error) {
	if t.IsZero() {
		t = h.now()
	}
	ev := HistoryEvent{Time: t.UTC(), UnixMs: t.UnixMilli(), Kind: kind, Replica: replica, Reason: reason}
	if err != nil {
		ev.Error = err.Error()
	}
	h.events[h.enext] = ev
	h.enext = (h.enext + 1) % len(h.events)
	if h.enext == 0 {
		h.efull = true
	}
}

// count adds one event of kind on replica to the counts. h.mu held.
func (h *History) count(replica, kind string) {
	m := h.counts[replica]
	if m == nil {
		if len(h.counts) >= maxCountedReplicas {
			replica = otherEndpoint
			m = h.counts[replica]
		}
		if m == nil {
			m = map[string]uint64{}
			h.counts[replica] = m
		}
	}
	m[kind]++
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
	if h.autoscale != nil {
		h.addAutoscale(&p, h.autoscale())
	}
	clear(h.lat)
	h.prevAt = now
	h.points[h.next] = p
	h.next = (h.next + 1) % len(h.points)
	if h.next == 0 {
		h.full = true
	}
	h.addLife(p)
}

// addAutoscale adds the policy's view (stages, states, cost) to p.
func (h *History) addAutoscale(p *HistoryPoint, st autoscale.Status) {
	if len(st.Replicas) == 0 {
		return // no tick yet
	}
	cost := st.EstimatedCostPerHour
	p.CostPerHour = &cost
	for i := range p.Replicas {
		rp := &p.Replicas[i]
		for _, rs := range st.Replicas {
			if rs.Name == rp.Name {
				c := rs.CostPerHour
				rp.Stage, rp.AutoscaleState, rp.AutoscaleWhy, rp.CostPerHour = rs.Stage, rs.State, rs.Why, &c
			}
		}
	}
}

// meanOf is the mean of two optional values over their intervals.
func meanOf(a *float64, as float64, b *float64, bs float64) *float64 {
	switch {
	case a == nil:
		return b
	case b == nil || as+bs <= 0:
		return a
	}
	m := (*a*as + *b*bs) / (as + bs)
	return &m
}

// addLife adds one interval's point to the since-start series. When the
// series is full, each pair of its points becomes one: the series keeps
// its start and at most lifeCap points, at half the resolution. h.mu held.
func (h *History) addLife(p HistoryPoint) {
	if h.pendingN == 0 {
		h.pending = p
	} else {
		h.pending = mergePoints(h.pending, p)
	}
	h.pendingN++
	if h.pendingN < h.stride {
		return
	}
	h.life = append(h.life, h.pending)
	h.pending, h.pendingN = HistoryPoint{}, 0
	if len(h.life) < max(h.lifeCap, 2) {
		return
	}
	half := h.life[:0]
	for i := 0; i+1 < len(h.life); i += 2 {
		half = append(half, mergePoints(h.life[i], h.life[i+1]))
	}
	if len(h.life)%2 == 1 { // an odd cap: the newest stays alone
		half = append(half, h.life[len(h.life)-1])
	}
	clear(h.life[len(half):])
	h.life = half
	h.stride *= 2
	h.epoch++
}

// mergePoints is the point of a's interval followed by b's: counts summed,
// rates recomputed, gauges and percentiles the higher (a peak must stay
// visible in a long view), states and totals b's.
func mergePoints(a, b HistoryPoint) HistoryPoint {
	m := b
	m.Seconds = a.Seconds + b.Seconds
	m.UserAssignments = max(a.UserAssignments, b.UserAssignments)
	m.Waiting = max(a.Waiting, b.Waiting)
	m.InUse = max(a.InUse, b.InUse)
	m.CostPerHour = meanOf(a.CostPerHour, a.Seconds, b.CostPerHour, b.Seconds)
	m.Replicas = make([]ReplicaPoint, len(b.Replicas))
	var calls uint64
	for i, rb := range b.Replicas {
		r := rb
		if j := slices.IndexFunc(a.Replicas, func(ra ReplicaPoint) bool { return ra.Name == rb.Name }); j >= 0 {
			ra := a.Replicas[j]
			r.Calls += ra.Calls
			r.Errors += ra.Errors
			r.AppErrors += ra.AppErrors
			r.Failovers += ra.Failovers
			r.Ejections += ra.Ejections
			r.QueueTimeouts += ra.QueueTimeouts
			r.InUse = max(r.InUse, ra.InUse)
			r.Waiting = max(r.Waiting, ra.Waiting)
			r.WaitP50Ms, r.WaitP95Ms = maxMs(ra.WaitP50Ms, r.WaitP50Ms), maxMs(ra.WaitP95Ms, r.WaitP95Ms)
			r.CallP50Ms, r.CallP95Ms = maxMs(ra.CallP50Ms, r.CallP50Ms), maxMs(ra.CallP95Ms, r.CallP95Ms)
			r.CostPerHour = meanOf(ra.CostPerHour, a.Seconds, r.CostPerHour, b.Seconds)
		}
		setRates(&r, m.Seconds)
		calls += r.Calls
		m.Replicas[i] = r
	}
	if m.Seconds > 0 {
		m.CallsPerSecond = float64(calls) / m.Seconds
	}
	return m
}

// maxMs is the higher of two optional percentiles.
func maxMs(a, b *float64) *float64 {
	switch {
	case a == nil:
		return b
	case b == nil || *a > *b:
		return a
	}
	return b
}

// setRates computes r's rates from its counts over secs.
func setRates(r *ReplicaPoint, secs float64) {
	r.CallsPerSecond, r.ErrorRate, r.AppErrorRate = 0, 0, 0
	if secs > 0 {
		r.CallsPerSecond = float64(r.Calls) / secs
	}
	if r.Calls > 0 {
		r.ErrorRate = min(float64(r.Errors)/float64(r.Calls), 1)
		r.AppErrorRate = min(float64(r.AppErrors)/float64(r.Calls), 1)
	}
}

// replicaPoint turns one replica's statistics into its point. h.mu held.
func (h *History) replicaPoint(name string, rs pool.ReplicaStats, secs float64) ReplicaPoint {
	rp := ReplicaPoint{
		Name: name, State: displayState(rs), Idle: rs.AvailableConnections, InUse: rs.InUseConnections,
		Connecting: rs.Connecting, Max: int(h.max.Load()), Waiting: rs.QueueLength,
		Healthy: rs.HealthyConnections, Unhealthy: rs.UnhealthyConnections,
		CallsTotal: rs.Calls, ErrorsTotal: rs.Errors,
		EjectedSecondsLeft: rs.EjectedSecondsLeft, PermanentFailure: rs.PermanentFailure,
		Operator: rs.Operator,
	}
	rp.Serving = (rs.State == pool.StateReady || rs.State == "half-open") &&
		(rs.Operator == "" || rs.Operator == pool.OperatorEnabled)
	if rs.State != pool.StateReady { // a recovered replica's old error is history, not its state
		rp.LastError = rs.LastError
		if rs.LastErrorAt != nil {
			rp.LastErrorUnixMs = rs.LastErrorAt.UnixMilli()
		}
	}
	if len(rs.Endpoints) > 0 { // the pool has seen the Space's own queue
		rp.SpaceQueue = &SpaceQueue{Size: rs.SpaceQueue, ETASeconds: rs.SpaceETA}
	}
	ejections := h.counts[name][pool.EventEjected.String()]
	cur := counters{calls: rs.Calls, errors: rs.Errors, appErrors: rs.AppErrors, failovers: rs.Failovers,
		timeouts: rs.QueueTimeouts, ejections: ejections}
	rp.AppErrorsTotal, rp.FailoversTotal, rp.EjectionsTotal = rs.AppErrors, rs.Failovers, ejections
	if prev, seen := h.prev[name]; seen {
		rp.Calls = delta(cur.calls, prev.calls)
		rp.Errors = delta(cur.errors, prev.errors)
		rp.AppErrors = delta(cur.appErrors, prev.appErrors)
		rp.Failovers = delta(cur.failovers, prev.failovers)
		rp.QueueTimeouts = delta(cur.timeouts, prev.timeouts)
		rp.Ejections = delta(cur.ejections, prev.ejections)
	}
	h.prev[name] = cur
	setRates(&rp, secs)
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

// Doc returns the points of window (windowRecent, the default, or
// windowLife) taken after sinceMs (Unix milliseconds; 0: all), the
// events, oldest first, their counts and the endpoints.
func (h *History) Doc(window string, sinceMs int64) HistoryDoc {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	doc := HistoryDoc{
		Version: h.version, StartedUnixMs: h.started.UnixMilli(), UptimeSeconds: max(now.Sub(h.started).Seconds(), 0),
		Window: windowRecent, ResolutionSeconds: h.interval.Seconds(), Epoch: h.epoch,
		IntervalSeconds: h.interval.Seconds(), Capacity: len(h.points), Replicas: append([]string{}, h.names...),
		Points: []HistoryPoint{}, Events: []HistoryEvent{}, EventCounts: map[string]map[string]uint64{},
		Endpoints: []EndpointRow{},
	}
	keep := func(p HistoryPoint) {
		if p.UnixMs > sinceMs {
			doc.Points = append(doc.Points, p)
		}
	}
	if window == windowLife {
		doc.Window, doc.Capacity = windowLife, h.lifeCap
		doc.ResolutionSeconds = h.interval.Seconds() * float64(h.stride)
		for _, p := range h.life {
			keep(p)
		}
		if h.pendingN > 0 { // the newest intervals, not yet a whole point
			p := h.pending
			p.Partial = true
			keep(p)
		}
	} else {
		each(h.points, h.next, h.full, keep)
	}
	each(h.events, h.enext, h.efull, func(e HistoryEvent) { doc.Events = append(doc.Events, e) })
	for r, m := range h.counts {
		doc.EventCounts[r] = maps.Clone(m)
	}
	for name, e := range h.eps {
		row := EndpointRow{Endpoint: name, Calls: e.calls, Errors: e.errors, AppErrors: e.appErrors,
			P50Ms: e.dur.quantileMs(0.50), P95Ms: e.dur.quantileMs(0.95)}
		if e.calls > 0 {
			row.ErrorRate = float64(e.errors) / float64(e.calls)
		}
		doc.Endpoints = append(doc.Endpoints, row)
	}
	slices.SortFunc(doc.Endpoints, func(a, b EndpointRow) int { return strings.Compare(a.Endpoint, b.Endpoint) })
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

// logHistogram counts durations in buckets whose bounds grow by
// histGrowth, from histMinMs to a day: quantiles within 2.5 % of the
// truth, in histBuckets counters whatever the number of calls.
type logHistogram struct {
	n       uint64
	buckets [histBuckets]uint64
}

const (
	histGrowth  = 1.05
	histMinMs   = 0.1
	histBuckets = 422 // ln(86_400_000 ms / histMinMs) / ln(histGrowth), rounded up
)

func (l *logHistogram) add(d time.Duration) {
	ms := float64(d.Microseconds()) / 1000
	i := 0
	if ms > histMinMs {
		i = int(math.Ceil(math.Log(ms/histMinMs) / math.Log(histGrowth)))
	}
	l.buckets[min(max(i, 0), histBuckets-1)]++
	l.n++
}

// quantileMs is the nearest-rank q-quantile in milliseconds (the middle of
// its bucket), nil when empty.
func (l *logHistogram) quantileMs(q float64) *float64 {
	if l.n == 0 {
		return nil
	}
	rank := max(uint64(math.Ceil(q*float64(l.n))), 1)
	var seen uint64
	for i, c := range l.buckets {
		seen += c
		if seen >= rank {
			v := histMinMs
			if i > 0 { // bucket i holds (min·g^(i-1), min·g^i]
				v = histMinMs * math.Pow(histGrowth, float64(i)-0.5)
			}
			v = math.Round(v*100) / 100
			return &v
		}
	}
	return nil // not reached: the buckets sum to n
}
