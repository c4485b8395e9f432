package reliability_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/internal/redistest"
)

var (
	longRun = flag.Bool("reliability.long", os.Getenv("GRADIOPOOL_RELIABILITY") == "long",
		"run the long matrix and soak and write docs/RELIABILITY.md (also GRADIOPOOL_RELIABILITY=long)")
	// quickRun runs the opt-in cells at the short scale, without writing
	// the report: a check that they pass before a long run.
	quickRun = flag.Bool("reliability.quick", os.Getenv("GRADIOPOOL_RELIABILITY") == "quick",
		"also run the opt-in cells, at the short scale (also GRADIOPOOL_RELIABILITY=quick)")
)

// optedIn: the opt-in cells run (they take minutes at the long scale and
// start real Redis topologies, so plain `go test` leaves them out).
func optedIn() bool { return *longRun || *quickRun }

func TestMain(m *testing.M) {
	zerolog.SetGlobalLevel(zerolog.Disabled) // toxiproxy's own logs
	code := m.Run()
	if *longRun {
		if err := writeReport(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	// toxiproxy 2.5 leaves a link's goroutines blocked after reset_peer;
	// they are toxiproxy's (the test's network), not the gateway's.
	if err := goleak.Find(
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).write")); err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		code = 1
	}
	os.Exit(code)
}

// scale is the size of a run: short for CI, long on demand.
type scale struct {
	name     string
	workers  int
	hold     time.Duration // how long each fault lasts under load
	sessions int           // per replica
}

func currentScale() scale {
	if *longRun {
		return scale{name: "long", workers: 24, hold: 20 * time.Second, sessions: 8}
	}
	return scale{name: "short", workers: 6, hold: 1500 * time.Millisecond, sessions: 4}
}

// cell is one fault of the matrix. inject starts it on a running
// environment and returns what heals it.
type cell struct {
	name   string
	fault  string
	inject func(e *env) (heal func())
	// load adjusts the steady load of this cell.
	load func(lc *loadConfig)
	// gatewayStops: the cell ends the gateway itself (SIGTERM); nothing
	// recovers afterwards.
	gatewayStops bool
	// cluster: the cell runs two gateways sharing a real redis-server (the
	// load goes to both in turn).
	cluster bool
	// check, when set, adds the cell's own checks once capacity is back;
	// it returns a note for the report.
	check func(e *env, r *result) string

	// optIn: only with GRADIOPOOL_RELIABILITY=long or quick.
	optIn bool
	// env, when set, tunes the cell's environment.
	env func(t testing.TB, ec *envConfig)
	// hold, when set, is how long the fault lasts instead of the scale's.
	hold func(sc scale) time.Duration
	// quietHeal: the load stops before the fault is healed, so that what
	// comes back comes back without traffic.
	quietHeal bool
	// run, when set, replaces the steady load and the fault: it drives
	// its own calls (counted in tl) and returns a note for the report.
	run func(e *env, sc scale, tl *tally, r *result) string
}

func cells() []cell {
	all := baseCells()
	if optedIn() {
		all = append(all, recoveryCells()...)
		all = append(all, redisCells()...)
	}
	return all
}

func baseCells() []cell {
	return []cell{
		{name: "baseline", fault: "none", inject: func(e *env) func() { return func() {} }},
		{name: "latency", fault: "toxiproxy latency 250 ms ±50 on replica 1, both ways",
			inject: func(e *env) func() {
				a := e.toxic(0, `{"name":"lat_down","type":"latency","stream":"downstream","attributes":{"latency":250,"jitter":50}}`)
				b := e.toxic(0, `{"name":"lat_up","type":"latency","stream":"upstream","attributes":{"latency":250,"jitter":50}}`)
				return func() { a(); b() }
			}},
		{name: "slow body", fault: "toxiproxy bandwidth 4 KB/s downstream on replica 1",
			inject: func(e *env) func() {
				return e.toxic(0, `{"name":"bw","type":"bandwidth","stream":"downstream","attributes":{"rate":4}}`)
			}},
		{name: "reset mid-stream", fault: "toxiproxy reset_peer after 150 ms on replica 1 (every connection, streams included)",
			inject: func(e *env) func() {
				return e.toxic(0, `{"name":"reset","type":"reset_peer","stream":"downstream","attributes":{"timeout":150}}`)
			}},
		{name: "connection refused", fault: "replica 1's proxy stopped: connections refused",
			inject: func(e *env) func() {
				e.reps[0].proxy.Stop()
				return func() {
					if err := e.reps[0].proxy.Start(); err != nil {
						e.t.Errorf("restarting the proxy: %v", err)
					}
				}
			}},
		{name: "stall (network)", fault: "toxiproxy timeout 0 on replica 1: accepts, never answers",
			inject: func(e *env) func() {
				return e.toxic(0, `{"name":"stall","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`)
			}},
		{name: "stall (SIGSTOP-like)", fault: "simulator Stall on replica 1: every request hangs",
			inject: func(e *env) func() {
				e.reps[0].sim.SetStall(true)
				return func() { e.reps[0].sim.SetStall(false) }
			}},
		{name: "join 5xx", fault: "simulator: every queue/join of replica 1 answers 500",
			inject: func(e *env) func() {
				e.reps[0].sim.FailNextJoins(1 << 30)
				return func() { e.reps[0].sim.FailNextJoins(0) }
			}},
		{name: "config 5xx after restart", fault: "simulator: replica 1 restarts (new app_id) and every /config answers 500",
			inject: func(e *env) func() {
				e.reps[0].sim.FailNextConfigs(1 << 30)
				e.reps[0].sim.Restart()
				return func() { e.reps[0].sim.FailNextConfigs(0) }
			}},
		{name: "Space asleep", fault: "simulator: replica 1 asleep (503 on every route, as a sleeping or crashed Space)",
			inject: func(e *env) func() {
				e.reps[0].sim.Sleep(time.Hour)
				return func() { e.reps[0].sim.Wake() }
			}},
		{name: "queue full", fault: "simulator: every join of replica 1 gets 503 Queue is full",
			inject: func(e *env) func() {
				e.reps[0].sim.SetQueueFull(true)
				return func() { e.reps[0].sim.SetQueueFull(false) }
			}},
		{name: "killed and restarted", fault: "replica 1 killed (connections cut, port refused, state lost) and restarted on the same port",
			inject: func(e *env) func() {
				e.reps[0].proxy.Stop()
				e.reps[0].sim.CloseClientConnections()
				e.reps[0].sim.Restart()
				return func() {
					if err := e.reps[0].proxy.Start(); err != nil {
						e.t.Errorf("restarting the proxy: %v", err)
					}
				}
			}},
		{name: "Redis down", fault: "two gateways sharing a real redis-server (default lease TTL, 15 s); Redis killed under load, then started again (empty)",
			cluster: true, inject: redisDown, check: checkRedisDown},
		{name: "caller disconnects", fault: "half the callers go away at a random moment in their first 400 ms (waiting, connecting, joined, streaming)",
			inject: func(e *env) func() { return func() {} },
			load:   func(lc *loadConfig) { lc.disconnect = 0.5 }},
		{name: "gateway SIGTERM", fault: "the gateway drains (drain_timeout 300 ms) with calls in flight; new calls are refused once it closes",
			inject:       func(e *env) func() { go e.shutdown(); return func() {} },
			gatewayStops: true},
	}
}

// result is one row of the report.
type result struct {
	cell                       cell
	sent, results              int
	codes, transport           string
	untyped, late, disconnects int
	twice, ran                 int
	inUseAfter                 int
	goroutinesBefore, after    int
	recover                    string
	note                       string
	problems                   []string
	examples                   []string
}

func (r *result) fail(format string, a ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, a...))
}

var (
	reportMu sync.Mutex
	report   []*result
)

func TestFaultMatrix(t *testing.T) {
	sc := currentScale()
	for _, c := range cells() {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			if c.cluster && !redisInstalled() {
				reportMu.Lock()
				report = append(report, &result{cell: c, recover: "not run", note: "redis-server is not installed"})
				reportMu.Unlock()
			}
			r := runCell(t, sc, c)
			reportMu.Lock()
			report = append(report, r)
			reportMu.Unlock()
			t.Logf("%s: sent %d, results %d, errors [%s], transport [%s], untyped %d, late %d, twice %d, in use after %d, goroutines %d -> %d, recover %s",
				c.name, r.sent, r.results, r.codes, r.transport, r.untyped, r.late, r.twice, r.inUseAfter, r.goroutinesBefore, r.after, r.recover)
			if r.note != "" {
				t.Log(r.note)
			}
			for _, p := range r.problems {
				t.Error(p)
			}
		})
	}
}

func runCell(t *testing.T, sc scale, c cell) *result {
	r := &result{cell: c}
	ec := envConfig{replicas: 2, maxSessions: sc.sessions, workTime: 40 * time.Millisecond, drainTimeout: 30 * time.Second}
	if c.gatewayStops {
		ec.drainTimeout = 300 * time.Millisecond
	}
	if c.cluster {
		ec.redis = redistest.StartServer(t) // skips the cell without redis-server
		ec.gateways = 2
	}
	if c.env != nil {
		c.env(t, &ec)
	}
	r.goroutinesBefore = settledGoroutines(0, 0)
	e := newEnv(t, ec)
	closed := false
	defer func() {
		if !closed {
			e.close()
		}
	}()
	// Warm: both replicas connected and serving.
	if d, ok := e.recovery(20 * time.Second); !ok {
		t.Fatalf("the environment did not come up within %v", d)
	}
	lc := loadConfig{workers: sc.workers, deadline: 2 * time.Second, slack: 1500 * time.Millisecond}
	if c.load != nil {
		c.load(&lc)
	}
	tl := newTally()
	e.tally = tl
	var healed time.Time
	if c.run != nil {
		r.note = c.run(e, sc, tl, r)
		healed = time.Now()
	} else {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		loaded := make(chan struct{})
		go func() { e.load(ctx, lc, tl); close(loaded) }()
		time.Sleep(300 * time.Millisecond)
		heal := c.inject(e)
		hold := sc.hold
		if c.hold != nil {
			hold = c.hold(sc)
		}
		time.Sleep(hold)
		if c.quietHeal {
			stop()
			<-loaded
		}
		heal()
		healed = time.Now()
		if !c.quietHeal {
			time.Sleep(300 * time.Millisecond)
			stop()
			<-loaded
		}
	}

	if c.gatewayStops {
		r.recover = "n/a (gateway stopped)"
	} else if d, ok := e.recovery(60 * time.Second); ok {
		r.recover = (time.Since(healed)).Round(10 * time.Millisecond).String()
	} else {
		r.recover = "not within " + d.String()
		r.fail("full capacity did not come back within %v of healing", d)
	}
	if c.check != nil {
		r.note = strings.TrimSpace(r.note + " " + c.check(e, r))
	}
	r.inUseAfter = e.settledInUse(20 * time.Second)
	if r.inUseAfter != 0 {
		r.fail("%d sessions still in use after the load stopped", r.inUseAfter)
	}
	emails := e.logs.emailLines()
	e.close()
	closed = true
	r.after = settledGoroutines(r.goroutinesBefore, 20*time.Second)
	if r.after > r.goroutinesBefore+2 {
		r.fail("%d goroutines after the cell, %d before", r.after, r.goroutinesBefore)
		buf := make([]byte, 1<<20)
		t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
	}

	tl.mu.Lock()
	r.sent, r.results, r.untyped, r.late, r.disconnects = tl.sent, tl.results, tl.untyped, tl.late, tl.disconnected
	r.examples = tl.examples
	tl.mu.Unlock()
	r.codes, r.transport = tl.codeList(), tl.transportList()
	r.twice, r.ran = e.runs.twice()
	if r.twice != 0 {
		r.fail("%d calls ran twice", r.twice)
	}
	if r.untyped != 0 {
		r.fail("%d answers were neither a result nor a typed error, e.g. %q", r.untyped, r.examples)
	}
	if r.late != 0 {
		r.fail("%d calls ended later than their deadline (%v) plus %v: %s", r.late, lc.deadline, lc.slack, strings.Join(tl.lateOnes, "; "))
	}
	// Once the gateway stopped, a request on a connection it was closing
	// gets no answer (it never ran: checked below); otherwise every call
	// must be answered.
	if !c.gatewayStops && len(tl.unanswered) > 0 {
		r.fail("calls without an HTTP answer: %s, e.g. %q", r.transport, r.examples)
	}
	ranUnanswered := 0
	for _, id := range tl.unanswered {
		if e.runs.ranOf(id) > 0 {
			ranUnanswered++
		}
	}
	if ranUnanswered > 0 {
		r.fail("%d calls ran at a replica but their caller got no HTTP answer", ranUnanswered)
	}
	if r.results == 0 && !c.gatewayStops {
		r.fail("no call succeeded during the cell")
	}
	if emails > 0 {
		r.fail("%d log lines contain a caller's e-mail", emails)
	}
	return r
}

// recovery waits until every replica is ready and five calls in a row
// succeed; it reports the time it took.
func (e *env) recovery(limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	okInRow := 0
	lc := loadConfig{deadline: 2 * time.Second, slack: time.Second}
	for i := 0; time.Since(start) < limit; i++ {
		tl := newTally()
		e.call(lc, tl, 1+2*i) // anonymous (least loaded), each gateway in turn
		if tl.results == 1 {
			okInRow++
		} else {
			okInRow = 0
		}
		if okInRow >= 5 && e.allReady() {
			return time.Since(start), true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return limit, false
}

func (e *env) allReady() bool {
	for i, gw := range e.gws {
		if e.down[i].Load() {
			continue
		}
		st := gw.Pool().Stats(context.Background())
		for _, p := range st.Pools {
			if p.State != "ready" {
				return false
			}
		}
		if len(st.Pools) != len(e.reps) {
			return false
		}
	}
	return e.redisUp(true)
}

// settledInUse waits for the sessions in use and the waiters to drop to
// zero and returns what is left at the end.
func (e *env) settledInUse(limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		n := 0
		for _, gw := range e.gws {
			st := gw.Pool().Stats(context.Background())
			n += st.InUseConnections
			for _, p := range st.Pools {
				n += p.QueueLength
			}
		}
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settledGoroutines waits (up to limit) for the goroutine count to come
// down to base+2 and returns the last count. toxiproxy's own goroutines
// (the test's network) are not counted.
func settledGoroutines(base int, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		runtime.GC()
		n := ourGoroutines()
		if base == 0 || n <= base+2 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ourGoroutines() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.TrimSpace(g) != "" && !strings.Contains(g, "Shopify/toxiproxy") {
			n++
		}
	}
	return n
}

func redisInstalled() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// redisDown kills the cluster's redis-server under load; healing starts
// it again (empty, as a Redis without persistence).
var redisDown = redisLost("Redis down", (*redistest.Server).Stop, (*redistest.Server).Start)

// checkRedisDown: while Redis was down the replicas stayed within the
// limit and calls kept completing (no stretch longer than maxRedisGap
// without one); after the restart (the rejoin and the recovery included)
// the limit held again. A gateway's own peak is reported, not bounded by
// its local share: for a lease TTL after the loss each gateway keeps to
// the leases Redis counted for it, which may be more than its share (the
// total is the limit).
func checkRedisDown(e *env, r *result) string {
	share := max(1, e.limit/len(e.gws))
	o := e.outage
	if o.peakTotal > e.limit {
		for _, l := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(l, "cluster:") {
				e.t.Log(l)
			}
		}
		r.fail("%s: a replica ran %d calls at once, the limit is %d", o.what, o.peakTotal, e.limit)
	}
	if o.gap > maxRedisGap {
		r.fail("%s: no call completed for %v (bound %v)", o.what, o.gap.Round(10*time.Millisecond), maxRedisGap)
	}
	after := 0
	for _, rep := range e.reps {
		total, _ := rep.w.peaks()
		after = max(after, total)
	}
	if after > e.limit {
		r.fail("after Redis came back (%s): a replica ran %d calls at once, the limit is %d", o.what, after, e.limit)
	}
	return fmt.Sprintf("every gateway local within %v; longest stretch without a completed call from the fault to the heal %v; from 200 ms after the notice, at most %d calls at once per gateway on a replica (local share %d, the leases Redis counted for it during the first lease TTL), %d per replica (limit %d), %d calls served until Redis was back. After it came back: at most %d per replica (limit %d); every gateway rejoined and full capacity back within %s.",
		o.noticed.Round(10*time.Millisecond), o.gap.Round(10*time.Millisecond), o.peakOne, share, o.peakTotal, e.limit, o.served, after, e.limit, r.recover)
}
