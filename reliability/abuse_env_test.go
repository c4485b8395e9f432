package reliability_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// The abuse suite's gateway is a `gradiopool serve` subprocess, so that its
// resident memory (/proc/PID/status) and goroutines (go_goroutines of its
// own /metrics) are the gateway's alone, not the test's nor the replicas'.
// Callers come from three loopback addresses, so that the per-address
// bounds of one do not touch the others: the attacker from 127.0.0.1, the
// honest callers from 127.0.0.2, the monitor (metrics, pool-stats) from
// 127.0.0.3.
const (
	attackerKey = "abuse-attacker-key"
	honestKey   = "abuse-honest-key"
	aliceKey    = "abuse-alice-key"
	abuseAdmin  = "abuse-admin-token"
	honestAddr  = "127.0.0.2"
	monitorAddr = "127.0.0.3"
)

// abuseApp is the replicas' app: the simulator's reference app (upper,
// counter with gr.State, slow, ...) and "big" (a string of the asked
// length) and "endless" (a generator that yields 10 kB until cancelled).
func abuseApp() *gradiotest.App {
	a := gradiotest.DefaultApp()
	a.Handle("big", func(_ context.Context, c *gradiotest.Call) ([]any, error) {
		n, err := c.Float(0)
		if err != nil {
			return nil, err
		}
		return []any{strings.Repeat("x", int(n))}, nil
	}, []gradiotest.Component{gradiotest.Number("n")}, nil)
	chunk := strings.Repeat("y", 10_000)
	a.HandleGenerator("endless", func(ctx context.Context, _ *gradiotest.Call, yield func(...any) error) error {
		endlessStarted.Add(1)
		defer endlessEnded.Add(1)
		for {
			if err := yield(chunk); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}, nil, nil)
	return a
}

// endlessStarted and endlessEnded count the endless generator's calls
// at the replicas (row 11 waits for its own to end there).
var endlessStarted, endlessEnded atomic.Int64

var (
	abuseBuildOnce sync.Once
	abuseBin       string
	abuseBuildErr  error
)

// gradiopoolBinary builds cmd/gradiopool once per test run (a plain build,
// as deployed: the race detector would multiply its memory).
func gradiopoolBinary(t testing.TB) {
	t.Helper()
	abuseBuildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gradiopool-abuse")
		if err != nil {
			abuseBuildErr = err
			return
		}
		abuseBin = filepath.Join(dir, "gradiopool")
		if out, err := exec.Command("go", "build", "-o", abuseBin, "../cmd/gradiopool").CombinedOutput(); err != nil {
			abuseBuildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if abuseBuildErr != nil {
		t.Fatal(abuseBuildErr)
	}
}

// abuseEnv is one gateway subprocess over simulated replicas.
type abuseEnv struct {
	t        testing.TB
	sc       abuseScale
	sims     []*gradiotest.Server // the gateway's replicas; spare is not one until added
	spare    *gradiotest.Server
	cmd      *exec.Cmd
	waited   chan error
	url      string
	cfgPath  string
	uploads  string
	stderr   *os.File
	attacker *http.Client // 127.0.0.1, attacker's key
	honest   *http.Client // 127.0.0.2, honest key
	alice    *http.Client // 127.0.0.2, alice's key
	monitor  *http.Client // 127.0.0.3, admin token
	fnSlow   int
}

// keyed adds a bearer key to every request without one.
type keyed struct {
	key  string
	base http.RoundTripper
}

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "" && k.key != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+k.key)
	}
	return k.base.RoundTrip(r)
}

// clientFrom is an HTTP client whose connections come from the loopback
// address from and carry key.
func clientFrom(from, key string, conns int) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: conns, MaxConnsPerHost: 0, DisableCompression: true}
	return &http.Client{Transport: keyed{key: key, base: tr}}
}

func closeIdle(c *http.Client) {
	if k, ok := c.Transport.(keyed); ok {
		k.base.(*http.Transport).CloseIdleConnections()
	}
}

// newAbuseEnv starts the replicas (three, and a spare one the stalled
// /config attack adds); each attack gets a fresh gateway (startGateway).
func newAbuseEnv(t testing.TB, sc abuseScale) *abuseEnv {
	t.Helper()
	gradiopoolBinary(t)
	e := &abuseEnv{t: t, sc: sc,
		attacker: clientFrom("127.0.0.1", attackerKey, 64),
		honest:   clientFrom(honestAddr, honestKey, 16),
		alice:    clientFrom(honestAddr, aliceKey, 16),
		monitor:  clientFrom(monitorAddr, abuseAdmin, 2),
	}
	start := func() *gradiotest.Server {
		s := gradiotest.NewUnstartedServer(abuseApp())
		s.StepDelay = 5 * time.Millisecond
		s.DefaultConcurrencyLimit = -1 // the replica runs what the gateway sends; the gateway's slots are under test
		s.Start()
		t.Cleanup(s.Close)
		return s
	}
	for range 3 {
		e.sims = append(e.sims, start())
	}
	e.spare = start()
	return e
}

// startGateway starts a fresh `gradiopool serve` over the three replicas,
// with the scale's settings and then extra (an attack's own), and waits
// until it has them all ready; t's cleanup stops it.
func (e *abuseEnv) startGateway(t testing.TB, extra map[string]string) {
	t.Helper()
	dir := t.TempDir()
	e.uploads = filepath.Join(dir, "uploads")
	e.cfgPath = filepath.Join(dir, "gradiopool.yaml")
	e.url = ""
	e.writeReplicas(false)
	var err error
	if e.stderr, err = os.Create(filepath.Join(dir, "gateway.log")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"GRADIOPOOL_API_KEYS="+strings.Join([]string{attackerKey, honestKey, aliceKey}, ","),
		"GRADIOPOOL_ADMIN_TOKEN="+abuseAdmin,
		"GRADIOPOOL_HASH_KEY=abuse-hash-key-0123456789abcdef",
		"GRADIOPOOL_LISTEN=127.0.0.1:0",
		"GRADIOPOOL_LOG_FORMAT=json",
		"GRADIOPOOL_LOG_LEVEL=warn",
		"GRADIOPOOL_FRONTDOOR_UPLOAD_DIR="+e.uploads,
	)
	for k, v := range merge(e.sc.settings, extra) {
		env = append(env, k+"="+v)
	}
	e.cmd = exec.Command(abuseBin, "serve", "--config", e.cfgPath)
	e.cmd.Env = env
	e.cmd.Stderr = e.stderr
	e.cmd.Stdout = e.stderr
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.waited = make(chan error, 1)
	go func() { e.waited <- e.cmd.Wait() }()
	t.Cleanup(e.stop)
	// Level warn hides "gateway listening": the port is found from the
	// process's listening socket instead.
	deadline := time.Now().Add(30 * time.Second)
	for e.url == "" {
		if addr := listeningAddr(e.cmd.Process.Pid); addr != "" {
			e.url = "http://" + addr
			break
		}
		select {
		case err := <-e.waited:
			e.waited <- err
			t.Fatalf("gateway exited: %v: %s", err, e.log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not listen: %s", e.log())
		}
	}
	if !e.waitUntil(30*time.Second, func() bool { return e.readyReplicas() == 3 }) {
		t.Fatalf("the gateway's 3 replicas did not become ready: %s", e.log())
	}
	e.fnSlow = e.fnIndex("slow")
}

// listeningAddr is the TCP address pid listens on, from /proc/PID/net/tcp
// and the process's socket inodes ("" until it listens).
func listeningAddr(pid int) string {
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
			continue
		}
		hostPort := strings.Split(f[1], ":")
		port, err := strconv.ParseUint(hostPort[1], 16, 16)
		if err != nil {
			continue
		}
		return fmt.Sprintf("127.0.0.1:%d", port)
	}
	return ""
}

func (e *abuseEnv) log() string {
	b, _ := os.ReadFile(e.stderr.Name())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop ends the gateway (SIGTERM, then SIGKILL after 20 s).
func (e *abuseEnv) stop() {
	if e.cmd.Process == nil {
		return
	}
	_ = e.cmd.Process.Signal(os.Interrupt)
	select {
	case <-e.waited:
	case <-time.After(20 * time.Second):
		_ = e.cmd.Process.Kill()
		<-e.waited
	}
	_ = e.stderr.Close()
	for _, c := range []*http.Client{e.attacker, e.honest, e.alice, e.monitor} {
		closeIdle(c)
	}
}

// writeReplicas writes the configuration file: the three replicas, and
// the spare one too when withSpare.
func (e *abuseEnv) writeReplicas(withSpare bool) {
	var b strings.Builder
	b.WriteString("replicas:\n")
	for _, s := range e.sims {
		fmt.Fprintf(&b, "  - %s\n", s.URL)
	}
	if withSpare {
		fmt.Fprintf(&b, "  - %s\n", e.spare.URL)
	}
	if err := os.WriteFile(e.cfgPath, []byte(b.String()), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// reload applies the configuration file (POST /api/admin/reload).
func (e *abuseEnv) reload() error {
	resp, err := e.monitor.Post(e.url+"/api/admin/reload", "application/json", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reload: %d %s", resp.StatusCode, b)
	}
	return nil
}

// procSample is one reading of the gateway process.
type procSample struct {
	rss        int64 // bytes
	goroutines int
}

// sample reads the gateway's resident memory and goroutines.
func (e *abuseEnv) sample() (procSample, error) {
	var s procSample
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.cmd.Process.Pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			s.rss = kb << 10
		}
	}
	m, err := e.metrics()
	if err != nil {
		return s, err
	}
	s.goroutines = int(m["go_goroutines"])
	return s, nil
}

// metrics reads the gateway's /metrics: each series summed over its
// labels, and also kept per label set ("name{labels}").
func (e *abuseEnv) metrics() (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/metrics", nil)
	resp, err := e.monitor.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %d", resp.StatusCode)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		name, _, _ := strings.Cut(series, "{")
		m[name] += v
		m[series] = v
	}
	return m, sc.Err()
}

// metric is one series (summed over labels containing every one of with).
func (e *abuseEnv) metric(name string, with ...string) float64 {
	m, err := e.metrics()
	if err != nil {
		return -1
	}
	if len(with) == 0 {
		return m[name]
	}
	sum := 0.0
	for k, v := range m {
		if !strings.HasPrefix(k, name+"{") {
			continue
		}
		all := true
		for _, w := range with {
			all = all && strings.Contains(k, w)
		}
		if all {
			sum += v
		}
	}
	return sum
}

func (e *abuseEnv) readyReplicas() int { return int(e.metric("gradiopool_replica_up")) }

// waitUntil polls cond every 50 ms for up to limit (a bound to end the
// wait, not a timed assertion) and reports whether it held.
func (e *abuseEnv) waitUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fnIndex is the front door's fn_index of an api name.
func (e *abuseEnv) fnIndex(api string) int {
	resp, err := e.honest.Get(e.url + "/config")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	cfg, err := gradio.ParseConfig(b)
	if err != nil {
		e.t.Fatalf("front door /config: %d %v", resp.StatusCode, err)
	}
	for _, d := range cfg.Dependencies {
		if d.APIName == api {
			return d.FnIndex
		}
	}
	e.t.Fatalf("no endpoint %s in the front door's config", api)
	return -1
}

// honestLoad is the callers that must be served during an attack: each
// worker calls /v1/predict/upper in a loop with its own key and address.
type honestLoad struct {
	ok      atomic.Int64
	mu      sync.Mutex
	failed  map[string]int
	slowest time.Duration // the longest honest call (a figure, never asserted)
	wg      sync.WaitGroup
	cancel  context.CancelFunc
}

func (e *abuseEnv) startHonest(workers int) *honestLoad {
	ctx, cancel := context.WithCancel(context.Background())
	h := &honestLoad{failed: map[string]int{}, cancel: cancel}
	for w := range workers {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				in := fmt.Sprintf("honest-%d-%d", w, i)
				t0 := time.Now()
				kind := e.honestCall(ctx, in)
				if d := time.Since(t0); kind != "stopped" {
					h.mu.Lock()
					h.slowest = max(h.slowest, d)
					h.mu.Unlock()
				}
				if kind == "" {
					h.ok.Add(1)
					continue
				}
				if kind == "stopped" {
					return
				}
				h.mu.Lock()
				h.failed[kind]++
				h.mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	return h
}

// honestCall is one call; "" when it was answered right, "stopped" when
// the load was stopped meanwhile, else what went wrong.
func (e *abuseEnv) honestCall(ctx context.Context, in string) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/predict/upper", strings.NewReader(`{"data":["`+in+`"]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Gradiopool-Timeout", "20s")
	resp, err := e.honest.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "stopped"
		}
		return transportKind(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && strings.Contains(string(b), strings.ToUpper(in)) {
		return ""
	}
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return "stopped"
	}
	if c := errorCode(b); c != "" {
		return fmt.Sprintf("%d %s", resp.StatusCode, c)
	}
	return fmt.Sprintf("%d untyped", resp.StatusCode)
}

// stop ends the load and returns its counts.
func (h *honestLoad) stop() (ok int64, failed map[string]int, slowest time.Duration) {
	h.cancel()
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok.Load(), h.failed, h.slowest
}

// sampler keeps the peaks of the gateway's memory and goroutines.
type sampler struct {
	peak procSample
	mu   sync.Mutex
	stop chan struct{}
	done chan struct{}
}

func (e *abuseEnv) startSampler() *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			if p, err := e.sample(); err == nil {
				s.mu.Lock()
				s.peak.rss = max(s.peak.rss, p.rss)
				s.peak.goroutines = max(s.peak.goroutines, p.goroutines)
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *sampler) end() procSample {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}
