package gateway

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gradiopool/gradiopool/internal/version"
)

// MetricsNamespace prefixes every metric name.
const MetricsNamespace = "gradiopool"

// DurationBuckets are the histogram buckets in seconds, from 5 ms up to the
// 10-minute calls the pool is built for.
var DurationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Metrics is the gateway's Prometheus metrics on a registry of its own (not
// the global one). Labels are replica names, route patterns, status codes,
// error codes and session states: never an e-mail, key or session id.
type Metrics struct {
	reg *prometheus.Registry

	connect   *prometheus.HistogramVec // replica, result
	wait      *prometheus.HistogramVec // replica
	use       *prometheus.HistogramVec // replica
	httpDur   *prometheus.HistogramVec // route, code
	httpReqs  *prometheus.CounterVec   // route, code
	failovers prometheus.Counter
	errors    *prometheus.CounterVec // code
	calls     *prometheus.CounterVec // replica
	created   *prometheus.CounterVec // replica
	destroyed *prometheus.CounterVec // replica, reason

	hooks metricHooks // the admin history's view of calls and pool events
}

// NewMetrics returns metrics reading the pool gauges from b at scrape time
// (b may be nil: no pool gauges).
func NewMetrics(b Backend) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg: reg,
		connect: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "session_create_seconds",
			Help:    "Time to create (connect) one pooled session, by replica and result (ok or error).",
			Buckets: DurationBuckets,
		}, []string{"replica", "result"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "session_wait_seconds",
			Help:    "Time a call waited for a free session, by replica.",
			Buckets: DurationBuckets,
		}, []string{"replica"}),
		use: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "session_use_seconds",
			Help:    "Time a call held its session (join, the app's own queue, run), by replica.",
			Buckets: DurationBuckets,
		}, []string{"replica"}),
		httpDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "http_request_duration_seconds",
			Help:    "Gateway HTTP request duration by route pattern and status code.",
			Buckets: DurationBuckets,
		}, []string{"route", "code"}),
		httpReqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "http_requests_total",
			Help: "Gateway HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "failovers_total",
			Help: "Calls moved to another replica because one provably did not accept them.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "call_errors_total",
			Help: "Failed calls by error code (the code of the JSON error answer).",
		}, []string{"code"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "calls_total",
			Help: "Completed calls by replica.",
		}, []string{"replica"}),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "sessions_created_total",
			Help: "Pooled sessions created, by replica.",
		}, []string{"replica"}),
		destroyed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "sessions_destroyed_total",
			Help: "Pooled sessions destroyed, by replica and reason (idle, health, broken, lifetime, reset, ...).",
		}, []string{"replica", "reason"}),
	}
	reg.MustRegister(m.connect, m.wait, m.use, m.httpDur, m.httpReqs, m.failovers, m.errors, m.calls, m.created, m.destroyed,
		buildInfo(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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
		Namespace: MetricsNamespace, Name: "build_info",
		Help:        "Always 1; the labels say which build of gradiopool is running.",
		ConstLabels: prometheus.Labels{"version": v.Version, "revision": v.Revision, "goversion": v.GoVersion},
	})
	g.Set(1)
	return g
}

// Register adds the pool gauges of b, read at scrape time; call it once,
// when the metrics were made before the backend (NewMetrics(nil)).
func (m *Metrics) Register(b Backend) { m.reg.MustRegister(&poolCollector{b: b}) }

// Registry is the registry the metrics are on, e.g. to add collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveCreate records one session creation on replica (a pool hook).
func (m *Metrics) ObserveCreate(replica string, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.connect.WithLabelValues(replica, result).Observe(d.Seconds())
}

// ObserveFailover counts one failover (a pool hook).
func (m *Metrics) ObserveFailover() { m.failovers.Inc() }

func (m *Metrics) observeCall(replica string, wait, total time.Duration) {
	if wait > 0 {
		m.wait.WithLabelValues(replica).Observe(wait.Seconds())
	}
	m.use.WithLabelValues(replica).Observe((total - wait).Seconds())
	m.calls.WithLabelValues(replica).Inc()
	m.hooks.onCall(replica, wait, total)
}

func (m *Metrics) callError(code string) { m.errors.WithLabelValues(code).Inc() }

func (m *Metrics) observeHTTP(route string, status int, d time.Duration) {
	code := strconv.Itoa(status)
	m.httpReqs.WithLabelValues(route, code).Inc()
	m.httpDur.WithLabelValues(route, code).Observe(d.Seconds())
}

// poolCollector reads the pool's gauges and counters at scrape time, so the
// numbers are never stale and the pool needs no metrics code.
type poolCollector struct{ b Backend }

var (
	descSessions = prometheus.NewDesc(MetricsNamespace+"_sessions",
		"Pooled sessions by replica and state (idle, in_use, connecting).", []string{"replica", "state"}, nil)
	descMax = prometheus.NewDesc(MetricsNamespace+"_sessions_max",
		"Maximum sessions per replica (max_connections).", []string{"replica"}, nil)
	descUnhealthy = prometheus.NewDesc(MetricsNamespace+"_sessions_unhealthy",
		"Sessions whose last health check failed, by replica.", []string{"replica"}, nil)
	descWaiting = prometheus.NewDesc(MetricsNamespace+"_waiting_callers",
		"Callers waiting for a free session, by replica.", []string{"replica"}, nil)
	descQueueTimeouts = prometheus.NewDesc(MetricsNamespace+"_queue_timeouts_total",
		"Callers that gave up waiting for a session (queue_timeout), by replica.", []string{"replica"}, nil)
	descSpaceQueue = prometheus.NewDesc(MetricsNamespace+"_space_queue",
		"The Space's own queue as its estimation messages reported it (less what it worked off since), by replica.", []string{"replica"}, nil)
	descSpaceETA = prometheus.NewDesc(MetricsNamespace+"_space_eta_seconds",
		"Expected completion time of a new call on the replica: the Space's queue and ours, over its effective concurrency, plus one run.", []string{"replica"}, nil)
	descReady = prometheus.NewDesc(MetricsNamespace+"_ready",
		"1 when at least one replica is usable.", nil, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descMax, descUnhealthy, descWaiting, descQueueTimeouts, descSpaceQueue, descSpaceETA, descReady} {
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
	}
	ready := 0.0
	if c.b.Ready() {
		ready = 1
	}
	g(descReady, ready)
}
