package reliability_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool"
)

// runCounter counts executions per call id, across every replica: the
// simulator's own record of what ran, so that "run twice" is measured
// where it would happen.
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *runCounter) inc(id string) {
	c.mu.Lock()
	c.runs[id]++
	c.mu.Unlock()
}

// twice is how many call ids ran more than once, and how many ran at all.
func (c *runCounter) twice() (twice, ran int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.runs {
		if n > 1 {
			twice++
		}
	}
	return twice, len(c.runs)
}

// ranOf is how often id ran.
func (c *runCounter) ranOf(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

// workApp is the simulated app of one replica: "work" echoes its id after
// workTime (it honours cancellation, as a Gradio job does), counts its
// executions and, in w, the calls it runs at once per gateway.
func workApp(c *runCounter, w *witness, workTime time.Duration) *gradiotest.App {
	a := gradiotest.NewApp()
	a.Handle("work", func(ctx context.Context, call *gradiotest.Call) ([]any, error) {
		id, err := call.String(0)
		if err != nil {
			return nil, err
		}
		c.inc(id)
		gw := gatewayOf(id)
		w.enter(gw)
		defer w.leave(gw)
		if err := call.Sleep(ctx, workTime); err != nil {
			return nil, err
		}
		return []any{id}, nil
	}, nil, nil)
	return a
}

// gatewayOf is the gateway a call id was sent through ("c12-g1": 1).
func gatewayOf(id string) int {
	_, g, ok := strings.Cut(id, "-g")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(g)
	return n
}

// witness is one replica's exact count of the calls it runs at once, in
// total and per gateway (raised when the handler starts, lowered when it
// returns), with the peaks since the last reset.
type witness struct {
	mu                 sync.Mutex
	running, peak      int
	perGateway, gwPeak map[int]int
}

func newWitness() *witness { return &witness{perGateway: map[int]int{}, gwPeak: map[int]int{}} }

func (w *witness) enter(gw int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running++
	w.peak = max(w.peak, w.running)
	w.perGateway[gw]++
	w.gwPeak[gw] = max(w.gwPeak[gw], w.perGateway[gw])
}

func (w *witness) leave(gw int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running--
	w.perGateway[gw]--
}

// reset starts new peaks from what runs now.
func (w *witness) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peak = w.running
	for gw, n := range w.perGateway {
		w.gwPeak[gw] = n
	}
}

// peaks is the total peak and the highest peak of one gateway.
func (w *witness) peaks() (total, oneGateway int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.gwPeak {
		oneGateway = max(oneGateway, p)
	}
	return w.peak, oneGateway
}

// replica is one simulated app and the toxiproxy in front of it.
type replica struct {
	sim   *gradiotest.Server
	proxy *toxiproxy.Proxy
	w     *witness
}

// env is one gateway (or several sharing a Redis) over len(reps)
// replicas, each behind a toxiproxy.
type env struct {
	t      testing.TB
	runs   *runCounter
	reps   []*replica
	gw     *gateway.Gateway // gws[0]
	gws    []*gateway.Gateway
	urls   []string // of gws
	url    string   // urls[0]
	stops  []context.CancelFunc
	served []chan error
	client *http.Client
	logs   *lockedBuffer
	redis  *redistest.Server // the cluster's standalone Redis, if any
	// redisURL is the cluster's Redis (standalone, Sentinel or Cluster
	// URL); empty without a cluster.
	redisURL string
	limit    int // max_connections of each replica
	// down marks gateways the load no longer sends calls to (a dead one).
	down   []atomic.Bool
	cfg    gateway.Config // of every gateway, before ec.gateway tuned it
	logger *slog.Logger
	// tally is the steady load's, for cells that report calls served
	// during their fault.
	tally *tally

	// Set by a cell's fault for its check.
	outage outageFigures
}

// outageFigures is what the "Redis down" and "Redis hung" cells measured.
type outageFigures struct {
	what               string        // "Redis down"
	results0, served   int           // the load's results when measuring began; served until healed
	noticed            time.Duration // from stopping Redis until every gateway was local
	peakTotal, peakOne int           // while Redis was down: one replica, all gateways / one gateway
	restarted          time.Time
	gap                time.Duration // the longest stretch without a completed call, from the fault to the heal
}

// lockedBuffer is the gateway's log sink. Every line is searched for the
// callers' e-mail domain as it is written; with discard set (the soak) the
// lines are not kept, so that the log does not weigh in the heap samples.
type lockedBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	discard bool
	emails  int // lines that contained an e-mail of the load's users
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if strings.Contains(string(p), "example.com") {
		l.emails++
	}
	if l.discard {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) emailLines() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.emails
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// envConfig tunes one environment.
type envConfig struct {
	replicas     int
	maxSessions  int
	workTime     time.Duration
	drainTimeout time.Duration
	discardLogs  bool // keep no log lines (they are still searched)
	// gateways > 1 needs redis: the gateways are one cluster through it.
	gateways int
	redis    *redistest.Server
	// redisURL, when set, is used instead of redis's address (Sentinel,
	// Cluster, an ACL user).
	redisURL string
	// sim and gateway, when set, tune each simulated replica before it
	// starts and each gateway's configuration (i: its index).
	sim     func(s *gradiotest.Server)
	gateway func(i int, cfg *gateway.Config)
}

// toxiServer is the in-process toxiproxy server the proxies belong to.
var toxiServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())

func newEnv(t testing.TB, ec envConfig) *env {
	t.Helper()
	e := &env{t: t, runs: &runCounter{runs: map[string]int{}}, logs: &lockedBuffer{discard: ec.discardLogs},
		redis: ec.redis, redisURL: ec.redisURL, limit: ec.maxSessions}
	if e.redisURL == "" && ec.redis != nil {
		e.redisURL = "redis://" + ec.redis.Addr + "/0"
	}
	var urls []string
	for i := range ec.replicas {
		w := newWitness()
		sim := gradiotest.NewUnstartedServer(workApp(e.runs, w, ec.workTime))
		sim.DefaultConcurrencyLimit = -1
		sim.HeartbeatInterval = time.Second
		if ec.sim != nil {
			ec.sim(sim)
		}
		sim.Start()
		px := toxiproxy.NewProxy(toxiServer, fmt.Sprintf("%s-r%d", t.Name(), i), "127.0.0.1:0", strings.TrimPrefix(sim.URL, "http://"))
		if err := px.Start(); err != nil {
			t.Fatal(err)
		}
		e.reps = append(e.reps, &replica{sim: sim, proxy: px, w: w})
		urls = append(urls, "http://"+px.Listen)
	}
	cfg := gateway.Config{
		DrainTimeout: ec.drainTimeout,
		Pool: pool.Config{Replicas: urls,
			MinConnections: 2, MaxConnections: ec.maxSessions, QueueTimeout: 10 * time.Second,
			HealthCheckInterval: 500 * time.Millisecond, ConnectRetries: 1,
		},
		KeepAliveInterval: 200 * time.Millisecond,
		Log:               gateway.LogConfig{Format: "json", Level: "debug"},
	}
	if e.redisURL != "" {
		// The default lease TTL (15 s; issue 36 item 6): what a shorter
		// one would hide is a gateway waiting a whole TTL at a Redis loss.
		cfg.Cluster = gateway.ClusterConfig{Name: "reliability"}
		cfg.Secrets.RedisURL = e.redisURL
		cfg.Secrets.HashKey = "reliability-key"
	}
	logger := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.cfg, e.logger = cfg, logger
	ctx := context.Background()
	e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for i := range max(1, ec.gateways) {
		cfg := cfg
		if ec.gateway != nil {
			ec.gateway(i, &cfg)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Cluster.AdvertiseURL = "http://" + ln.Addr().String()
		gw, err := gateway.Open(ctx, cfg, logger, gradio.WithHeaderTimeout(3*time.Second), gradio.WithCancelTimeout(2*time.Second))
		if err != nil {
			ln.Close()
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(ctx)
		served := make(chan error, 1)
		go func() { served <- gw.Serve(sctx, ln) }()
		e.gws = append(e.gws, gw)
		e.urls = append(e.urls, "http://"+ln.Addr().String())
		e.stops = append(e.stops, stop)
		e.served = append(e.served, served)
	}
	e.gw, e.url = e.gws[0], e.urls[0]
	e.down = make([]atomic.Bool, len(e.gws))
	return e
}

// shutdown drains the gateways (like SIGTERM) and waits for Serve.
func (e *env) shutdown() {
	if e.stops == nil {
		return
	}
	for _, stop := range e.stops {
		stop()
	}
	e.stops = nil
	for _, served := range e.served {
		if err := <-served; err != nil {
			e.t.Errorf("Serve: %v", err)
		}
	}
}

// close ends everything the environment started.
func (e *env) close() {
	e.shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, gw := range e.gws {
		if err := gw.Close(ctx); err != nil {
			e.t.Errorf("closing the gateway: %v", err)
		}
	}
	for _, r := range e.reps {
		r.proxy.Stop()
		r.sim.Close()
	}
	e.client.CloseIdleConnections()
}

// toxic adds a toxiproxy toxic (JSON as the toxiproxy API takes it) to
// replica i's proxy; the returned func removes it.
func (e *env) toxic(i int, js string) func() {
	px := e.reps[i].proxy
	w, err := px.Toxics.AddToxicJson(strings.NewReader(js))
	if err != nil {
		e.t.Fatalf("toxic %s: %v", js, err)
	}
	return func() {
		if err := px.Toxics.RemoveToxic(context.Background(), w.Name); err != nil {
			e.t.Errorf("removing toxic %s: %v", w.Name, err)
		}
	}
}

// redisUp reports whether every live gateway of the cluster (not marked
// down) reaches Redis (its gradiopool_redis_up gauge) and, when want, also
// sees every other live gateway alive (the local shares while Redis is lost divide the limit by the
// gateways last seen); true without a cluster.
func (e *env) redisUp(want bool) bool {
	if e.redisURL == "" {
		return true
	}
	live := 0
	for i := range e.gws {
		if !e.down[i].Load() {
			live++
		}
	}
	for i, gw := range e.gws {
		if e.down[i].Load() {
			continue
		}
		up, ok := gauge(e.t, gw, "gradiopool_redis_up")
		if !ok || (up == 1) != want {
			return false
		}
		if seen, ok := gauge(e.t, gw, "gradiopool_cluster_gateways_alive"); want && (!ok || int(seen) != live) {
			return false
		}
	}
	return true
}

// gauge reads an unlabelled gauge of gw's metrics.
func gauge(t testing.TB, gw *gateway.Gateway, name string) (float64, bool) {
	mfs, err := gw.Metrics().Registry().Gather()
	if err != nil {
		t.Errorf("metrics: %v", err)
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}
