package gateway

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/version"
	"github.com/gradiopool/gradiopool/pool"
)

// metricsNamespace prefixes every metric name.
const metricsNamespace = "gradiopool"

// durationBuckets are the histogram buckets in seconds, from 5 ms up to the
// 10-minute calls the pool is built for.
var durationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Metrics is the gateway's Prometheus metrics on a registry of its own (not
// the global one). Labels are replica names, route patterns, doors, the
// app's API names (bounded: see endpointLabels), status codes, error codes
// and session states: never an e-mail, key or session id.
type Metrics struct {
	reg *prometheus.Registry

	connect   *prometheus.HistogramVec // replica, result
	wait      *prometheus.HistogramVec // replica
	use       *prometheus.HistogramVec // replica
	httpDur   *prometheus.HistogramVec // route, code
	httpReqs  *prometheus.CounterVec   // route, code
	failovers *prometheus.CounterVec   // route, replica, endpoint
	errors    *prometheus.CounterVec   // route, replica, endpoint, code
	calls     *prometheus.CounterVec   // route, replica, result
	created   *prometheus.CounterVec   // replica
	stateLost *prometheus.CounterVec   // replica
	destroyed *prometheus.CounterVec   // replica, reason
	appErrors *prometheus.CounterVec   // route, replica, endpoint
	callDur   *prometheus.HistogramVec // route, replica

	endpoints endpointLabels
	all       []prometheus.Collector // everything registered through register
	hooks     metricHooks            // the admin history's view of calls and pool events
}

// Call routes: the door a call came in by (the route label of the call
// metrics, and of pool events through pool.WithRoute).
const (
	routeV1        = "v1"        // /v1/predict, /v1/submit
	routeCall      = "call"      // /gradio_api/call (Gradio's REST call API)
	routeFrontDoor = "frontdoor" // the Gradio front door (queue/join + queue/data)
)

// Call results, the result label of gradiopool_calls_total.
const (
	resultOK       = "ok"
	resultAppError = "app_error" // the app answered with an error (gr.Error): the replica worked
	resultError    = "error"     // the gateway, the pool or the replica failed the call
)

// noReplica labels a call that failed before any replica took it.
const noReplica = "none"

// NewMetrics returns metrics reading the pool gauges from b at scrape time
// (b may be nil: no pool gauges).
func NewMetrics(b Backend) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg: reg,
		connect: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "session_create_seconds",
			Help:    "Time to create (connect) one pooled session, by replica and result (ok or error).",
			Buckets: durationBuckets,
		}, []string{"replica", "result"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "session_wait_seconds",
			Help:    "Time a call waited for a free session, by replica.",
			Buckets: durationBuckets,
		}, []string{"replica"}),
		use: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "session_use_seconds",
			Help:    "Time a call held its session (join, the app's own queue, run), by replica.",
			Buckets: durationBuckets,
		}, []string{"replica"}),
		httpDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "http_request_duration_seconds",
			Help:    "Gateway HTTP request duration by route pattern and status code.",
			Buckets: durationBuckets,
		}, []string{"route", "code"}),
		httpReqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "http_requests_total",
			Help: "Gateway HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "failovers_total",
			Help: "Calls moved away from a replica because it provably did not accept them, by door (route), the replica left and endpoint.",
		}, []string{"route", "replica", "endpoint"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "call_errors_total",
			Help: "Calls failed by the gateway, the pool or the replica (not the app's own errors: see app_errors_total), by door, replica (none: before any), endpoint and error code.",
		}, []string{"route", "replica", "endpoint", "code"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "calls_total",
			Help: "Ended calls by door (route: v1, call, frontdoor), replica (none: failed before any) and result (ok, app_error, error).",
		}, []string{"route", "replica", "result"}),
		appErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "app_errors_total",
			Help: "Calls the app answered with an error (gr.Error, an exception in the function): the replica worked. By door, replica and endpoint.",
		}, []string{"route", "replica", "endpoint"}),
		callDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "call_duration_seconds",
			Help:    "Duration of ended calls as their caller saw them (wait for a session included), by door and replica.",
			Buckets: durationBuckets,
		}, []string{"route", "replica"}),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "sessions_created_total",
			Help: "Pooled sessions created, by replica.",
		}, []string{"replica"}),
		stateLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "state_lost_total",
			Help: "Sticky /v1 users whose own session (gr.State) was left on a replica that was removed, drained, failed or restarted: their next call ran with an empty state. By the replica the state was on.",
		}, []string{"replica"}),
		destroyed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "sessions_destroyed_total",
			Help: "Pooled sessions destroyed, by replica and reason (idle, health, broken, lifetime, reset, ...).",
		}, []string{"replica", "reason"}),
	}
	m.register(m.connect, m.wait, m.use, m.httpDur, m.httpReqs, m.failovers, m.errors, m.calls, m.created, m.destroyed, m.stateLost,
		buildInfo(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.register(m.appErrors, m.callDur)
	if b != nil {
		m.Register(b)
	}
	return m
}

// buildInfo is the constant gauge gradiopool_build_info = 1, labelled with
// what `gradiopool version` prints, so that a dashboard can tell which
// build each gateway runs.
func buildInfo() prometheus.Collector {
	v := version.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metricsNamespace, Name: "build_info",
		Help:        "Always 1; the labels say which build of gradiopool is running.",
		ConstLabels: prometheus.Labels{"version": v.Version, "revision": v.Revision, "goversion": v.GoVersion},
	})
	g.Set(1)
	return g
}

// Register adds the pool gauges of b, read at scrape time; call it once,
// when the metrics were made before the backend (NewMetrics(nil)). When b
// knows the app's API names (endpointSource), they bound the endpoint
// label.
func (m *Metrics) Register(b Backend) {
	m.register(&poolCollector{b: b})
	if p := b.Pool(); p != nil {
		m.register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: metricsNamespace + "_user_assignments_evicted_total",
			Help: "Users forgotten (least recently used first) to keep at most pool.max_user_assignments."},
			func() float64 { return float64(p.UsersEvicted()) }))
	}
	if src, ok := b.(endpointSource); ok {
		m.endpoints.setSource(src.EndpointLabels)
	}
}

// watchEventBudget exports the use of the gateway's event budget
// (upstream_event_bytes): what it holds now, and the streams it cut or
// refused for room, by whose fault. A second budget on the same Metrics
// is not exported (PoolConfig makes one per gateway).
func (m *Metrics) watchEventBudget(b *gradio.EventBudget) {
	if b == nil {
		return
	}
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricsNamespace + "_event_budget_held_bytes",
			Help: "Bytes of upstream_event_bytes held now: events read in part, and large outputs not yet delivered."},
			func() float64 { return float64(b.Held()) }),
	}
	for _, fault := range []string{"replica", "caller"} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: metricsNamespace + "_event_budget_cuts_total",
			Help:        "Replicas' streams cut or refused for room in upstream_event_bytes, by fault: the replica's (502) or a caller's (429 event_share).",
			ConstLabels: prometheus.Labels{"fault": fault}},
			func() float64 {
				replica, caller := b.Charged()
				if fault == "replica" {
					return float64(replica)
				}
				return float64(caller)
			}))
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err == nil {
			m.all = append(m.all, c)
		}
	}
}

// register registers cs and keeps them, so that a test can list every
// metric name the gateway exports (deploy_test.go), even those with no
// sample yet.
func (m *Metrics) register(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.all = append(m.all, cs...)
}

// Registry is the registry the metrics are on, e.g. to add collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// observeCreate records one session creation on replica (a pool hook).
func (m *Metrics) observeCreate(replica string, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.connect.WithLabelValues(replica, result).Observe(d.Seconds())
}

// observeFailover counts one failover away from replica of a call to
// endpoint that came in by route (a pool hook: pool.Event's fields).
func (m *Metrics) observeFailover(route, replica, endpoint string) {
	m.failovers.WithLabelValues(cmp.Or(route, "other"), cmp.Or(replica, noReplica), m.endpoints.label(endpoint)).Inc()
}

// CallRecord is one ended call as the metrics and the dashboard count it.
type CallRecord struct {
	Route    string // routeV1, routeCall, routeFrontDoor
	Replica  string // "" when the call failed before any replica took it
	Endpoint string // the api_name called ("fn_index=N" from the front door)
	Wait     time.Duration
	Total    time.Duration // as the caller saw it, Wait included
	// Code is "" for a success, "app_error" for the app's own error
	// (gr.Error), else the error code of the JSON error answer.
	Code string
}

// Result is the record's result label: ok, app_error or error.
func (c CallRecord) Result() string {
	switch c.Code {
	case "":
		return resultOK
	case codeAppError:
		return resultAppError
	}
	return resultError
}

// observeCall counts one ended call, whatever its door and result: the
// one place every door's calls are counted.
func (m *Metrics) observeCall(c CallRecord) {
	replica := cmp.Or(c.Replica, noReplica)
	c.Endpoint = m.endpoints.label(c.Endpoint)
	m.calls.WithLabelValues(c.Route, replica, c.Result()).Inc()
	m.callDur.WithLabelValues(c.Route, replica).Observe(c.Total.Seconds())
	switch c.Result() {
	case resultAppError:
		m.appErrors.WithLabelValues(c.Route, replica, c.Endpoint).Inc()
	case resultError:
		m.errors.WithLabelValues(c.Route, replica, c.Endpoint, c.Code).Inc()
	}
	if c.Replica != "" {
		if c.Wait > 0 {
			m.wait.WithLabelValues(replica).Observe(c.Wait.Seconds())
		}
		m.use.WithLabelValues(replica).Observe(max(c.Total-c.Wait, 0).Seconds())
	}
	m.hooks.onCall(c)
}

func (m *Metrics) observeHTTP(route string, status int, d time.Duration) {
	code := strconv.Itoa(status)
	m.httpReqs.WithLabelValues(route, code).Inc()
	m.httpDur.WithLabelValues(route, code).Observe(d.Seconds())
}

// poolCollector reads the pool's gauges and counters at scrape time, so the
// numbers are never stale and the pool needs no metrics code.
type poolCollector struct{ b Backend }

var (
	descSessions = prometheus.NewDesc(metricsNamespace+"_sessions",
		"Pooled sessions by replica and state (idle, in_use, connecting).", []string{"replica", "state"}, nil)
	descMax = prometheus.NewDesc(metricsNamespace+"_sessions_max",
		"Maximum sessions per replica (max_connections).", []string{"replica"}, nil)
	descUnhealthy = prometheus.NewDesc(metricsNamespace+"_sessions_unhealthy",
		"Sessions whose last health check failed, by replica.", []string{"replica"}, nil)
	descWaiting = prometheus.NewDesc(metricsNamespace+"_waiting_callers",
		"Callers waiting for a free session, by replica.", []string{"replica"}, nil)
	descQueueTimeouts = prometheus.NewDesc(metricsNamespace+"_queue_timeouts_total",
		"Callers that gave up waiting for a session (queue_timeout), by replica.", []string{"replica"}, nil)
	descSpaceQueue = prometheus.NewDesc(metricsNamespace+"_space_queue",
		"The Space's own queue as its estimation messages reported it (less what it worked off since), by replica.", []string{"replica"}, nil)
	descSpaceETA = prometheus.NewDesc(metricsNamespace+"_space_eta_seconds",
		"Expected completion time of a new call on the replica: the Space's queue and ours, over its effective concurrency, plus one run.", []string{"replica"}, nil)
	descReady = prometheus.NewDesc(metricsNamespace+"_ready",
		"1 when at least one replica is connected and not ejected or suspect (what /readyz says, draining aside).", nil, nil)
	descState = prometheus.NewDesc(metricsNamespace+"_replica_state",
		"1 for the state each replica is in (new, connecting, ready, half-open, suspect, ejected, probing, sleeping, closed), 0 for the others.", []string{"replica", "state"}, nil)
	descUp = prometheus.NewDesc(metricsNamespace+"_replica_up",
		"1 when the replica is ready (taking traffic), else 0.", []string{"replica"}, nil)
	descEjectedLeft = prometheus.NewDesc(metricsNamespace+"_replica_ejected_seconds_left",
		"Back-off left of the replica's ejection, seconds (0 when not ejected).", []string{"replica"}, nil)
	descOperator = prometheus.NewDesc(metricsNamespace+"_replica_operator_state",
		"1 for the operator's control each replica is in (enabled, draining, drained, disabled: POST /api/admin/replicas/{name}/drain|disable|enable), 0 for the others.", []string{"replica", "state"}, nil)
	descPermanent = prometheus.NewDesc(metricsNamespace+"_replica_permanent_failure",
		"1 when the replica's last connect failure is permanent (no such Space, a token refused): retried slowly, a person must act.", []string{"replica"}, nil)
)

// replicaStates are the values of the state label: each replica exports
// all of them (0 or 1), so that an alert on a state sees a 0 before the 1.
// A state the pool adds later is exported too when a replica is in it.
var replicaStates = []string{"new", "connecting", "ready", "half-open", "suspect", "ejected", "probing", "sleeping", "closed"}

// operatorStates are the values of the operator_state label.
var operatorStates = []string{pool.OperatorEnabled, pool.OperatorDraining, pool.OperatorDrained, pool.OperatorDisabled}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descMax, descUnhealthy, descWaiting, descQueueTimeouts, descSpaceQueue, descSpaceETA, descReady,
		descState, descUp, descEjectedLeft, descPermanent, descOperator} {
		ch <- d
	}
}

// scrapeTimeout bounds the backend's part of one scrape.
const scrapeTimeout = 5 * time.Second

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	cnt := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	// A scrape has no context of its own; the gauges' only I/O (a shared
	// assignment store) is bounded by this one.
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	for _, r := range c.b.Gauges(ctx) {
		g(descSessions, float64(r.Idle), r.Name, "idle")
		g(descSessions, float64(r.InUse), r.Name, "in_use")
		g(descSessions, float64(r.Connecting), r.Name, "connecting")
		g(descMax, float64(r.Max), r.Name)
		g(descUnhealthy, float64(r.Unhealthy), r.Name)
		g(descWaiting, float64(r.Waiting), r.Name)
		cnt(descQueueTimeouts, r.QueueTimeouts, r.Name)
		g(descSpaceQueue, float64(r.SpaceQueue), r.Name)
		g(descSpaceETA, r.SpaceETA, r.Name)
		if r.State != "" {
			for _, s := range replicaStates {
				g(descState, b2f(r.State == s), r.Name, s)
			}
			if !slices.Contains(replicaStates, r.State) {
				g(descState, 1, r.Name, r.State)
			}
			g(descUp, b2f(r.State == "ready"), r.Name)
		}
		g(descEjectedLeft, r.EjectedSecondsLeft, r.Name)
		permanent := 0.0
		if r.PermanentFailure {
			permanent = 1
		}
		g(descPermanent, permanent, r.Name)
		if r.Operator != "" {
			for _, s := range operatorStates {
				g(descOperator, b2f(r.Operator == s), r.Name, s)
			}
		}
	}
	g(descReady, b2f(c.b.Ready()))
}

// errReplica is the replica a call's error names, "" when none.
func errReplica(err error) string {
	var re *pool.ReplicaError
	if errors.As(err, &re) {
		return re.Replica
	}
	return ""
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
