package reliability_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
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

// workApp is the simulated app: "work" echoes its id after workTime (it
// honours cancellation, as a Gradio job does) and counts its executions.
func workApp(c *runCounter, workTime time.Duration) *gradiotest.App {
	a := gradiotest.NewApp()
	a.Handle("work", func(ctx context.Context, call *gradiotest.Call) ([]any, error) {
		id, err := call.String(0)
		if err != nil {
			return nil, err
		}
		c.inc(id)
		if err := call.Sleep(ctx, workTime); err != nil {
			return nil, err
		}
		return []any{id}, nil
	}, nil, nil)
	return a
}

// replica is one simulated app and the toxiproxy in front of it.
type replica struct {
	sim   *gradiotest.Server
	proxy *toxiproxy.Proxy
}

// env is one gateway over len(reps) replicas, each behind a toxiproxy.
type env struct {
	t      testing.TB
	runs   *runCounter
	reps   []*replica
	gw     *gateway.Gateway
	url    string
	stop   context.CancelFunc
	served chan error
	client *http.Client
	logs   *lockedBuffer
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
}

// toxiServer is the in-process toxiproxy server the proxies belong to.
var toxiServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())

func newEnv(t testing.TB, ec envConfig) *env {
	t.Helper()
	e := &env{t: t, runs: &runCounter{runs: map[string]int{}}, logs: &lockedBuffer{discard: ec.discardLogs}}
	app := workApp(e.runs, ec.workTime)
	var urls []string
	for i := range ec.replicas {
		sim := gradiotest.NewUnstartedServer(app)
		sim.DefaultConcurrencyLimit = -1
		sim.HeartbeatInterval = time.Second
		sim.Start()
		px := toxiproxy.NewProxy(toxiServer, fmt.Sprintf("%s-r%d", t.Name(), i), "127.0.0.1:0", strings.TrimPrefix(sim.URL, "http://"))
		if err := px.Start(); err != nil {
			t.Fatal(err)
		}
		e.reps = append(e.reps, &replica{sim: sim, proxy: px})
		urls = append(urls, "http://"+px.Listen)
	}
	cfg := gateway.Config{
		Replicas:     urls,
		DrainTimeout: ec.drainTimeout,
		Pool: gateway.PoolConfig{
			MinConnections: 2, MaxConnections: ec.maxSessions, QueueTimeout: 10 * time.Second,
			HealthCheckInterval: 500 * time.Millisecond, ConnectRetries: 1,
		},
		KeepAliveInterval: 200 * time.Millisecond,
		Log:               gateway.LogConfig{Format: "json", Level: "debug"},
	}
	logger := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	gw, err := gateway.Open(ctx, cfg, logger, gradio.WithHeaderTimeout(3*time.Second), gradio.WithCancelTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e.gw = gw
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.url = "http://" + ln.Addr().String()
	sctx, stop := context.WithCancel(ctx)
	e.stop = stop
	e.served = make(chan error, 1)
	go func() { e.served <- gw.Serve(sctx, ln) }()
	e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	return e
}

// shutdown drains the gateway (like SIGTERM) and waits for Serve.
func (e *env) shutdown() {
	if e.stop == nil {
		return
	}
	e.stop()
	e.stop = nil
	if err := <-e.served; err != nil {
		e.t.Errorf("Serve: %v", err)
	}
}

// close ends everything the environment started.
func (e *env) close() {
	e.shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.gw.Close(ctx); err != nil {
		e.t.Errorf("closing the gateway: %v", err)
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
