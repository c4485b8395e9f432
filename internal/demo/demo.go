package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// demoSpaces are the seed's three replicas, served by simulated apps
// registered under these ids in an in-process Hub emulation.
var demoSpaces = []string{"dentsudigital/mugenAILP_1", "dentsudigital/mugenAILP_dev", "dentsudigital/mugenAILP_stage"}

// demoPlan is the size and timing of the demo workload.
type demoPlan struct {
	users, anon      int           // registered users (e-mails) and anonymous callers
	callsPerUser     int           // calls per registered user after the first
	callsPerAnon     int           // calls per anonymous caller
	longCalls        int           // users that also run one long call
	hubCost, cfgCost time.Duration // connect cost: Hub look-up; /config and /info each
	work             time.Duration // per-call work in the app (Latency knob)
	concurrency      int           // calls of one endpoint a replica runs at once
	timeScale        float64       // compresses the app's sleeps (long call, generator steps)
	longSeconds      float64       // the long call's nominal length, before compression
	think            time.Duration // max pause between a user's calls
}

func demoPlanFor(quick bool) demoPlan {
	if quick {
		return demoPlan{users: 6, anon: 2, callsPerUser: 4, callsPerAnon: 3, longCalls: 1,
			hubCost: 50 * time.Millisecond, cfgCost: 75 * time.Millisecond, work: 20 * time.Millisecond,
			concurrency: 10, timeScale: 0.002, longSeconds: 300, think: 20 * time.Millisecond}
	}
	return demoPlan{users: 20, anon: 6, callsPerUser: 10, callsPerAnon: 8, longCalls: 3,
		hubCost: time.Second, cfgCost: time.Second, work: 200 * time.Millisecond,
		concurrency: 10, timeScale: 0.01, longSeconds: 300, think: 300 * time.Millisecond}
}

// Options are the demo's settings; the zero value is the full demo.
type Options struct {
	// Quick runs a smaller, faster workload (a few seconds; for tests).
	Quick bool
	// Verbose writes the gateway's and pool's logs to stderr (text).
	Verbose bool
	// Keep keeps the replicas and the gateway (and so its dashboard at
	// /admin) serving for this long after the summary, so a person can look;
	// ctx ending stops it sooner. Zero: stop at once.
	Keep time.Duration
	// JSClientDir holds testdata/jsclient (demo.mjs and an installed
	// @gradio/client) for the official JS client step. Empty means
	// testdata/jsclient in the working directory or one of its parents.
	JSClientDir string
}

// Run is `gradiopool demo`: three simulated replicas behind the gateway, a
// mixed workload over real HTTP, a progress line on stderr and a summary of
// measured figures on stdout.
func Run(ctx context.Context, opts Options, stdout, stderr io.Writer) error {
	plan := demoPlanFor(opts.Quick)
	logger := slog.New(slog.DiscardHandler)
	if opts.Verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}

	// The replicas and the Hub.
	hub := gradiotest.NewHub()
	defer hub.Close()
	hub.SetConnectCost(plan.hubCost)
	var sims []*gradiotest.Server
	for _, id := range demoSpaces {
		s := gradiotest.NewUnstartedServer(nil)
		s.ConnectCost = plan.cfgCost
		s.Latency = plan.work
		s.DefaultConcurrencyLimit = plan.concurrency
		s.TimeScale = plan.timeScale
		s.StepDelay = 500 * time.Millisecond // scaled by TimeScale too
		s.Start()
		defer s.Close()
		hub.AddSpace(id, s)
		sims = append(sims, s)
	}
	fmt.Fprintf(stdout, "gradiopool demo: 3 simulated replicas %s\n", strings.Join(demoSpaces, ", "))
	fmt.Fprintf(stdout, "  each: connect cost %v per Hub look-up and %v per /config or /info answer, %v of work per call,\n",
		plan.hubCost, plan.cfgCost, plan.work)
	fmt.Fprintf(stdout, "  concurrency_limit %d per endpoint (set explicitly; Gradio's default is 1), app sleeps compressed x%g\n",
		plan.concurrency, 1/plan.timeScale)

	// The gateway, on a free loopback port.
	cfg := gateway.Config{
		Listen: "127.0.0.1:0",
		HubURL: hub.URL,
		Pool: pool.Config{Replicas: demoSpaces,
			MinConnections: 5, MaxConnections: 50, QueueTimeout: 30 * time.Second,
			HealthCheckInterval: 2 * time.Second, ConnectRetries: 1,
			StickySessions: true, // each registered user keeps their session: gr.State survives
		},
		DrainTimeout: 5 * time.Second,
	}
	g, err := gateway.Open(ctx, cfg, logger)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		_ = g.Close(ctx)
		return fmt.Errorf("demo: %w", err)
	}
	base := "http://" + ln.Addr().String()
	gctx, stopGateway := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		err := g.Serve(gctx, ln)
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Close(cctx)
		served <- err
	}()
	defer func() {
		stopGateway()
		<-served
	}()
	fmt.Fprintf(stdout, "  gateway on %s (live dashboard: %s/admin); %d registered users + %d anonymous callers\n\n",
		base, base, plan.users, plan.anon)

	d := &demo{plan: plan, base: base, hub: hub, sims: sims, stderr: stderr,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}}
	defer d.http.CloseIdleConnections()

	// What every call cost before pooling: a fresh client per call.
	fmt.Fprintln(stderr, "measuring the baseline: one fresh client (Hub look-up, /config, call) per call ...")
	baseline := d.measureBaseline(ctx)
	fmt.Fprintln(stderr, "running the workload through the gateway ...")

	start := time.Now()
	stopProgress := d.progress()
	d.runWorkload(ctx)
	stopProgress()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Fprintln(stderr, "driving one official JS client (@gradio/client) through the Gradio front door ...")
	js := d.runJSClient(ctx, opts.JSClientDir)
	if ctx.Err() != nil {
		return ctx.Err()
	}

	stats, _ := d.get("/api/admin/pool-stats")
	metricsText, _ := d.get("/metrics")
	d.summary(stdout, baseline, elapsed, stats, metricsText, js)
	if d.ok.Load() == 0 {
		return errors.New("demo: no call succeeded")
	}
	if opts.Keep > 0 {
		fmt.Fprintf(stdout, "\nkeeping the replicas and the gateway up for %v: dashboard at %s/admin (Ctrl-C to stop)\n", opts.Keep, base)
		t := time.NewTimer(opts.Keep)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	if js.Err != nil {
		return fmt.Errorf("demo: the official JS client through the front door: %w", js.Err)
	}
	return nil
}

// demo is the state of one demo run.
type demo struct {
	plan   demoPlan
	base   string
	hub    *gradiotest.Hub
	sims   []*gradiotest.Server
	http   *http.Client
	stderr io.Writer

	total, done, ok, failed, inFlight atomic.Int64
	failedAt                          atomic.Int64 // calls done when a replica was failed

	mu      sync.Mutex // guards samples and events
	samples []sample
	events  []string
}

// sample is one measured call.
type sample struct {
	kind    string // "first", "short", "stream", "rest", "long"
	user    string // "" anonymous
	replica string
	latency time.Duration
	code    string // "" when it succeeded, else the error code
	outputs int    // stream: partial outputs received
	output  string // predict: the first output, when it is a string
}

func (d *demo) record(s sample) {
	d.done.Add(1)
	if s.code == "" {
		d.ok.Add(1)
	} else {
		d.failed.Add(1)
	}
	d.mu.Lock()
	d.samples = append(d.samples, s)
	d.mu.Unlock()
}

func (d *demo) note(format string, a ...any) {
	d.mu.Lock()
	d.events = append(d.events, fmt.Sprintf(format, a...))
	d.mu.Unlock()
}

// measureBaseline connects a fresh Go client per call (what the seed's app
// did before pooling): one call per replica, in parallel.
func (d *demo) measureBaseline(ctx context.Context) []time.Duration {
	var mu sync.Mutex
	var out []time.Duration
	var wg sync.WaitGroup
	for _, id := range demoSpaces {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			c, err := gradio.Connect(ctx, id, gradio.WithHubURL(d.hub.URL))
			if err != nil {
				return
			}
			defer c.Close()
			if _, err := c.Predict(ctx, "upper", "baseline"); err != nil {
				return
			}
			mu.Lock()
			out = append(out, time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func (d *demo) runWorkload(ctx context.Context) {
	p := d.plan
	d.total.Store(int64(p.users*(1+p.callsPerUser) + p.longCalls + p.anon*p.callsPerAnon))
	failAt := d.total.Load() * 2 / 5
	var wg sync.WaitGroup
	var failOnce sync.Once
	maybeFail := func() {
		if d.done.Load() < failAt {
			return
		}
		failOnce.Do(func() {
			// The stage Space crashes: it answers 503 from now on.
			d.failedAt.Store(d.done.Load())
			d.hub.SetStage(demoSpaces[2], gradiotest.StageRuntimeError)
			d.note("after %d calls: %s crashed (RUNTIME_ERROR, answers 503)", d.failedAt.Load(), demoSpaces[2])
		})
	}
	for u := range p.users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(u), 42))
			user := fmt.Sprintf("user%02d@example.com", u+1)
			d.record(d.predict(ctx, "first", user, "upper", fmt.Sprintf("hello from user %d", u+1)))
			for i := range p.callsPerUser {
				if ctx.Err() != nil {
					return
				}
				maybeFail()
				time.Sleep(time.Duration(rng.Int64N(int64(p.think) + 1)))
				switch {
				case i%5 == 2:
					d.record(d.stream(ctx, user, 5))
				case i%5 == 4:
					d.record(d.rest(ctx, user, "rest call"))
				case i%5 == 1:
					// gr.State: the app counts this user's items in
					// their own session (sticky_sessions).
					d.record(d.predict(ctx, "state", user, "counter", fmt.Sprintf("item%d", i)))
				default:
					d.record(d.predict(ctx, "short", user, "upper", fmt.Sprintf("call %d", i)))
				}
			}
			if u < p.longCalls {
				d.record(d.predict(ctx, "long", user, "slow", p.longSeconds))
			}
		}()
	}
	for a := range p.anon {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(a), 7))
			for i := range p.callsPerAnon {
				if ctx.Err() != nil {
					return
				}
				maybeFail()
				time.Sleep(time.Duration(rng.Int64N(int64(p.think) + 1)))
				d.record(d.predict(ctx, "short", "", "upper", fmt.Sprintf("anonymous %d", i)))
			}
		}()
	}
	wg.Wait()
}

func (d *demo) post(ctx context.Context, path, user string, args ...any) (*http.Response, error) {
	body, _ := json.Marshal(map[string]any{"data": args})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+path, strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.Header.Set(gateway.UserHeader, user)
	}
	return d.http.Do(req)
}

func errCode(resp *http.Response) string {
	var e struct{ Error struct{ Code string } }
	b, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
		return e.Error.Code
	}
	return fmt.Sprintf("http_%d", resp.StatusCode)
}

func (d *demo) predict(ctx context.Context, kind, user, endpoint string, args ...any) sample {
	d.inFlight.Add(1)
	defer d.inFlight.Add(-1)
	t0 := time.Now()
	s := sample{kind: kind, user: user}
	resp, err := d.post(ctx, "/v1/predict/"+endpoint, user, args...)
	if err != nil {
		s.code, s.latency = "transport", time.Since(t0)
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.code, s.latency = errCode(resp), time.Since(t0)
		return s
	}
	var out struct {
		Replica string
		Data    []json.RawMessage
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	s.latency, s.replica = time.Since(t0), out.Replica
	if len(out.Data) > 0 {
		_ = json.Unmarshal(out.Data[0], &s.output)
	}
	if err != nil {
		s.code = "bad_answer"
	}
	return s
}

// stream calls the generator through POST /v1/submit and counts its
// partial outputs.
func (d *demo) stream(ctx context.Context, user string, n int) sample {
	d.inFlight.Add(1)
	defer d.inFlight.Add(-1)
	t0 := time.Now()
	s := sample{kind: "stream", user: user}
	resp, err := d.post(ctx, "/v1/submit/count", user, n)
	if err != nil {
		s.code, s.latency = "transport", time.Since(t0)
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.code, s.latency = errCode(resp), time.Since(t0)
		return s
	}
	s.code = "no_complete"
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			event = name
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		switch event {
		case "accepted":
			var a struct{ Replica string }
			_ = json.Unmarshal([]byte(data), &a)
			s.replica = a.Replica
		case "output":
			s.outputs++
		case "complete":
			s.code = ""
		case "error":
			var e struct{ Error struct{ Code string } }
			_ = json.Unmarshal([]byte(data), &e)
			s.code = e.Error.Code
		}
	}
	s.latency = time.Since(t0)
	return s
}

// rest uses Gradio's own REST shape: POST /gradio_api/call, then GET.
func (d *demo) rest(ctx context.Context, user, text string) sample {
	d.inFlight.Add(1)
	defer d.inFlight.Add(-1)
	t0 := time.Now()
	s := sample{kind: "rest", user: user}
	resp, err := d.post(ctx, "/gradio_api/call/upper", user, text)
	if err != nil {
		s.code, s.latency = "transport", time.Since(t0)
		return s
	}
	var ev struct {
		EventID string `json:"event_id"`
	}
	if resp.StatusCode != http.StatusOK {
		s.code, s.latency = errCode(resp), time.Since(t0)
		resp.Body.Close()
		return s
	}
	_ = json.NewDecoder(resp.Body).Decode(&ev)
	resp.Body.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/gradio_api/call/upper/"+ev.EventID, nil)
	resp, err = d.http.Do(req)
	if err != nil {
		s.code, s.latency = "transport", time.Since(t0)
		return s
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	s.latency = time.Since(t0)
	if !strings.Contains(string(b), "event: complete") {
		s.code = "rest_error"
	}
	return s
}

func (d *demo) get(path string) (string, error) {
	resp, err := d.http.Get(d.base + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// progress draws a one-line progress bar on stderr until the returned func
// is called: redrawn in place on a terminal, a line every 2 s otherwise.
func (d *demo) progress() func() {
	tty := false
	if f, ok := d.stderr.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	every := 2 * time.Second
	if tty {
		every = 100 * time.Millisecond
	}
	line := func() string {
		total, done := d.total.Load(), d.done.Load()
		const width = 30
		filled := 0
		if total > 0 {
			filled = int(done * width / total)
		}
		return fmt.Sprintf("[%s%s] %d/%d calls  ok %d  failed %d  in flight %d",
			strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total, d.ok.Load(), d.failed.Load(), d.inFlight.Load())
	}
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				if tty {
					fmt.Fprintf(d.stderr, "\r%s\n", line())
				} else {
					fmt.Fprintln(d.stderr, line())
				}
				return
			case <-t.C:
				if tty {
					fmt.Fprintf(d.stderr, "\r%s", line())
				} else {
					fmt.Fprintln(d.stderr, line())
				}
			}
		}
	}()
	return func() { close(stop); <-stopped }
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s)) + 0.5)
	return s[min(max(i-1, 0), len(s)-1)]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

func (d *demo) summary(w io.Writer, baseline []time.Duration, elapsed time.Duration, stats, metricsText string, js jsOutcome) {
	d.mu.Lock()
	samples := slices.Clone(d.samples)
	events := slices.Clone(d.events)
	d.mu.Unlock()

	fmt.Fprintf(w, "\nSummary (all figures measured in this run, %s of workload)\n", secs(elapsed))
	fmt.Fprintf(w, "  calls: %d ok, %d failed\n", d.ok.Load(), d.failed.Load())
	codes := map[string]int{}
	byKind := map[string][]time.Duration{}
	perUser := map[string]map[string]bool{}
	var streamOutputs, streams int
	for _, s := range samples {
		if s.code != "" {
			codes[s.code]++
			continue
		}
		byKind[s.kind] = append(byKind[s.kind], s.latency)
		if s.kind == "stream" {
			streams++
			streamOutputs += s.outputs
		}
		if s.user != "" && s.replica != "" {
			if perUser[s.user] == nil {
				perUser[s.user] = map[string]bool{}
			}
			perUser[s.user][s.replica] = true
		}
	}
	if len(codes) > 0 {
		var parts []string
		for c, n := range codes {
			parts = append(parts, fmt.Sprintf("%s %d", c, n))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, "  failures by code: %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "\n  %-46s %6s %9s %9s\n", "latency", "calls", "p50", "p95")
	row := func(name string, ds []time.Duration) {
		if len(ds) == 0 {
			return
		}
		fmt.Fprintf(w, "  %-46s %6d %9s %9s\n", name, len(ds), secs(percentile(ds, .5)), secs(percentile(ds, .95)))
	}
	row("connect per call, no pool (fresh client)", baseline)
	row("first call of a user (cold pool)", byKind["first"])
	row("warm short call (/v1/predict/upper)", byKind["short"])
	row("stateful call (/v1/predict/counter, gr.State)", byKind["state"])
	row("Gradio REST shape (/gradio_api/call/upper)", byKind["rest"])
	row("stream (/v1/submit/count, 5 outputs)", byKind["stream"])
	row(fmt.Sprintf("long call (%gs compressed x%g)", d.plan.longSeconds, 1/d.plan.timeScale), byKind["long"])
	if streams > 0 {
		fmt.Fprintf(w, "  streams delivered %d partial outputs (%.1f per stream)\n", streamOutputs, float64(streamOutputs)/float64(streams))
	}
	if b, s := percentile(baseline, .5), percentile(byKind["short"], .5); b > 0 && s > 0 {
		fmt.Fprintf(w, "  warm pooled calls were %.1fx faster than connecting per call (p50)\n", b.Seconds()/s.Seconds())
	}

	// gr.State: a user whose counter reached the number of their successful
	// counter calls kept one session throughout.
	stateCalls, stateLast := map[string]int{}, map[string]int{}
	for _, s := range samples {
		if s.kind == "state" && s.code == "" {
			stateCalls[s.user]++
			var k int
			if _, err := fmt.Sscanf(s.output, "%d items", &k); err == nil {
				stateLast[s.user] = k
			}
		}
	}
	kept := 0
	for u, n := range stateCalls {
		if stateLast[u] == n {
			kept++
		}
	}
	if len(stateCalls) > 0 {
		fmt.Fprintf(w, "\n  gr.State (sticky_sessions on): %d of %d users' counters counted every one of their calls", kept, len(stateCalls))
		if lost := len(stateCalls) - kept; lost > 0 {
			fmt.Fprintf(w, "; %d started over on a new session (their replica failed)", lost)
		}
		fmt.Fprintln(w)
	}

	moved := 0
	for _, reps := range perUser {
		if len(reps) > 1 {
			moved++
		}
	}
	fmt.Fprintf(w, "  sticky users: %d of %d registered users stayed on one replica", len(perUser)-moved, len(perUser))
	if moved > 0 {
		fmt.Fprintf(w, " (%d moved to another replica)", moved)
	}
	fmt.Fprintln(w)
	var st struct {
		Failovers uint64 `json:"failovers"`
		Pools     map[string]struct {
			State     string `json:"state"`
			Calls     uint64 `json:"calls"`
			Errors    uint64 `json:"errors"`
			Failovers uint64 `json:"failovers"`
		} `json:"pools"`
	}
	_ = json.Unmarshal([]byte(stats), &st)
	fmt.Fprintf(w, "  failovers: %d (calls the pool moved to another replica because one refused them)\n", st.Failovers)
	for _, e := range events {
		fmt.Fprintf(w, "  event: %s\n", e)
	}
	names := make([]string, 0, len(st.Pools))
	for n := range st.Pools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := st.Pools[n]
		fmt.Fprintf(w, "  replica %-16s state %-9s calls %4d  errors %3d  failed over %3d\n", n, r.State, r.Calls, r.Errors, r.Failovers)
	}

	jsSummary(w, d.base, js)

	fmt.Fprintf(w, "\n  selected metrics (GET /metrics):\n")
	for _, line := range strings.Split(metricsText, "\n") {
		for _, p := range []string{"gradiopool_sessions{", "gradiopool_failovers_total", "gradiopool_session_create_seconds_count", "gradiopool_call_errors_total", "gradiopool_frontdoor_sessions ", "gradiopool_frontdoor_sessions_pinned{"} {
			if strings.HasPrefix(line, p) {
				fmt.Fprintf(w, "    %s\n", line)
			}
		}
	}

	fmt.Fprintf(w, "\n  pool statistics (GET /api/admin/pool-stats):\n")
	var pretty any
	if json.Unmarshal([]byte(stats), &pretty) == nil {
		b, _ := json.MarshalIndent(pretty, "  ", "  ")
		fmt.Fprintf(w, "  %s\n", b)
	} else {
		fmt.Fprintf(w, "  %s\n", stats)
	}
}
