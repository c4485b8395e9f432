package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// peerSpec is one peer run: the flags of testdata/jsclient/bench.mjs
// (written by the conformance helper), which the Go side mirrors.
type peerSpec struct {
	URL         string `json:"url"`
	Endpoint    string `json:"endpoint"`    // "/upper"
	Calls       int    `json:"calls"`       // timed calls per concurrency level
	Concurrency []int  `json:"concurrency"` // levels, e.g. 1 and 50
	Warmup      int    `json:"warmup"`      // untimed calls before each level
	Connects    int    `json:"connects"`    // timed connects, each client closed after
}

// peerResult is bench.mjs's output (the fields the report uses).
type peerResult struct {
	Tool          string `json:"tool"`
	ClientVersion string `json:"client_version"`
	Node          string `json:"node,omitempty"`
	Connect       struct {
		N     int     `json:"n"`
		First float64 `json:"first"`
		P50   float64 `json:"p50"`
		Max   float64 `json:"max"`
	} `json:"connect_ms"`
	Levels []peerLevel `json:"levels"`
	Memory struct {
		RSS      float64 `json:"rss"`
		HeapUsed float64 `json:"heap_used"`
	} `json:"memory_mib"`
	Note string `json:"note,omitempty"`
}

type peerLevel struct {
	Concurrency int     `json:"concurrency"`
	Calls       int     `json:"calls"`
	OK          int     `json:"ok"`
	Errors      int     `json:"errors"`
	Timeouts    int     `json:"timeouts"`
	FirstError  *string `json:"first_error"`
	P50         float64 `json:"p50_ms"`
	P95         float64 `json:"p95_ms"`
	P99         float64 `json:"p99_ms"`
	Mean        float64 `json:"mean_ms"`
	Max         float64 `json:"max_ms"`
	WallS       float64 `json:"wall_s"`
	CallsPerS   float64 `json:"calls_per_s"`
}

// runPeerGo measures our Go client exactly as bench.mjs measures the JS
// client: connects (each closed after), then per concurrency level a
// warm-up and the timed calls on one shared client.
func runPeerGo(ctx context.Context, spec peerSpec) (*peerResult, error) {
	res := &peerResult{Tool: "gradiopool gradio (Go)", ClientVersion: "this tree"}
	var connects []time.Duration
	for range spec.Connects {
		t0 := time.Now()
		c, err := gradio.Connect(ctx, spec.URL)
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		connects = append(connects, time.Since(t0))
		c.Close()
	}
	cs := Summarize(slices.Clone(connects), nil)
	res.Connect.N, res.Connect.First, res.Connect.P50, res.Connect.Max = len(connects), msf(connects[0]), msf(cs.P50), msf(cs.Max)
	c, err := gradio.Connect(ctx, spec.URL)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer c.Close()
	for _, conc := range spec.Concurrency {
		if spec.Warmup > 0 {
			ClosedLoopN(ctx, min(conc, spec.Warmup), spec.Warmup, func(ctx context.Context, _ int) error {
				_, err := c.Predict(ctx, spec.Endpoint, "hello")
				return err
			}, nil)
		}
		var firstErr *string
		var mu sync.Mutex
		r := ClosedLoopN(ctx, conc, spec.Calls, func(ctx context.Context, _ int) error {
			_, err := c.Predict(ctx, spec.Endpoint, "hello")
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					m := err.Error()
					firstErr = &m
				}
				mu.Unlock()
			}
			return err
		}, nil)
		l := r.Latency
		res.Levels = append(res.Levels, peerLevel{
			Concurrency: conc, Calls: spec.Calls, OK: l.N, Errors: l.Failed, FirstError: firstErr,
			P50: msf(l.P50), P95: msf(l.P95), P99: msf(l.P99), Mean: msf(l.Mean), Max: msf(l.Max),
			WallS: r.Elapsed.Seconds(), CallsPerS: r.Throughput,
		})
	}
	m := ReadMem()
	rss, _ := procRSS()
	res.Memory.RSS = rss / (1 << 20)
	res.Memory.HeapUsed = float64(m.HeapAlloc) / (1 << 20)
	return res, nil
}

func childGoClient(ctx context.Context, config string, stdout io.Writer) error {
	var spec peerSpec
	if err := json.Unmarshal([]byte(config), &spec); err != nil {
		return fmt.Errorf("bench: goclient child config: %w", err)
	}
	res, err := runPeerGo(ctx, spec)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(res)
	fmt.Fprintf(stdout, "%s\n", b)
	return nil
}

// procRSS reads this process's resident set and its peak from /proc.
func procRSS() (rss, peak float64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseFloat(fields[0], 64)
		switch k {
		case "VmRSS":
			rss = n * 1024
		case "VmHWM":
			peak = n * 1024
		}
	}
	return rss, peak
}

// jsScript finds the JS client benchmark script.
func (e *env) jsScript() (string, error) {
	if e.modDir == "" {
		return "", errNoSource
	}
	dir := filepath.Join(e.modDir, "testdata", "jsclient")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@gradio", "client")); err != nil {
		return "", fmt.Errorf("@gradio/client is not installed in testdata/jsclient (run `npm ci` there)")
	}
	p := filepath.Join(dir, "bench.mjs")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("testdata/jsclient/bench.mjs is missing")
	}
	return p, nil
}

func runPeerJS(ctx context.Context, script string, spec peerSpec) (*peerResult, error) {
	var conc []string
	for _, c := range spec.Concurrency {
		conc = append(conc, strconv.Itoa(c))
	}
	cmd := exec.CommandContext(ctx, "node", filepath.Base(script), spec.URL,
		"--endpoint", spec.Endpoint, "--calls", strconv.Itoa(spec.Calls), "--concurrency", strings.Join(conc, ","),
		"--warmup", strconv.Itoa(spec.Warmup), "--connects", strconv.Itoa(spec.Connects))
	cmd.Dir = filepath.Dir(script)
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("node %s: %v: %s", filepath.Base(script), err, lastLines(stderr.String(), 3))
	}
	return parsePeer(out)
}

func (e *env) runPeerGoChild(ctx context.Context, spec peerSpec) (*peerResult, error) {
	b, _ := json.Marshal(spec)
	cmd := e.childCommand(ctx, "goclient", string(b))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go client process: %v: %s", err, lastLines(stderr.String(), 3))
	}
	return parsePeer(out)
}

func parsePeer(out []byte) (*peerResult, error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var res peerResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return nil, fmt.Errorf("peer printed %q: %w", lastLines(string(out), 2), err)
	}
	return &res, nil
}

func runPeers(ctx context.Context, e *env, s *Section) error {
	spec := peerSpec{Endpoint: "/upper", Calls: e.pickInt(2000, 200), Concurrency: []int{1, 50}, Warmup: 20, Connects: e.pickInt(10, 3)}
	s.Method = fmt.Sprintf("The official JavaScript client (`@gradio/client`, pinned in testdata/jsclient/package-lock.json, run by Node through the conformance helper's "+
		"`testdata/jsclient/bench.mjs`) and our Go client (`gradio.Connect` + `Predict`, measured by the harness exactly as bench.mjs measures the JS client), "+
		"each in a process of its own, one after the other, against the same simulated replica in a third process (instant handler `upper`, unlimited concurrency). "+
		"Workload: %d timed connects (a fresh client each, closed after), then on one connected client, for concurrency 1 and 50: %d untimed calls, then %d timed "+
		"`predict(\"/upper\", [\"hello\"])` calls, that many at a time (one client shared by all, as an app server shares it). "+
		"Memory is the process's resident set after the runs, and its heap (Go: `HeapAlloc` after a forced GC; JS: `heapUsed` as bench.mjs reads it, without one, so the heap columns are not like for like; RSS is).",
		spec.Connects, spec.Warmup, spec.Calls)
	script, jsErr := e.jsScript()
	sm, err := e.startSims(ctx, simSpec{Replicas: 1})
	if err != nil {
		return err
	}
	defer sm.Close()
	spec.URL = sm.URLs[0]
	if !sm.Remote {
		s.note("the simulated replica ran inside the harness process (no helper-process command)")
	}
	var goRes, jsRes *peerResult
	var goErr error
	e.logf("  peers: Go client")
	if len(e.opts.Self) > 0 {
		goRes, goErr = e.runPeerGoChild(ctx, spec)
	} else {
		goRes, goErr = runPeerGo(ctx, spec)
		if goRes != nil {
			goRes.Note = "measured inside the harness process (no helper-process command): its RSS includes the harness"
		}
	}
	if jsErr == nil {
		e.logf("  peers: JS client (node %s)", filepath.Base(script))
		jsRes, jsErr = runPeerJS(ctx, script, spec)
	}
	if goErr != nil && jsErr != nil {
		return fmt.Errorf("the Go client: %v; the JS client: %v", goErr, jsErr)
	}
	t := Table{Header: []string{"client", "connect p50 (first)", "c=1 p50", "c=1 p99", "c=1 calls/s", "c=50 p50", "c=50 p99", "c=50 calls/s", "RSS", "heap", "errors"}}
	level := func(r *peerResult, c int) peerLevel {
		for _, l := range r.Levels {
			if l.Concurrency == c {
				return l
			}
		}
		return peerLevel{}
	}
	row := func(name string, r *peerResult, err error) {
		if r == nil {
			t.Rows = append(t.Rows, []string{name, "not measured: " + err.Error(), "", "", "", "", "", "", "", "", ""})
			return
		}
		l1, l50 := level(r, 1), level(r, 50)
		errs := fmt.Sprint(l1.Errors + l50.Errors + l1.Timeouts + l50.Timeouts)
		for _, l := range []peerLevel{l1, l50} {
			if l.FirstError != nil {
				errs += " (" + *l.FirstError + ")"
				break
			}
		}
		t.Rows = append(t.Rows, []string{name, fmt.Sprintf("%.1f ms (%.1f ms)", r.Connect.P50, r.Connect.First),
			fmt.Sprintf("%.3f ms", l1.P50), fmt.Sprintf("%.2f ms", l1.P99), fmt.Sprintf("%.0f", l1.CallsPerS),
			fmt.Sprintf("%.2f ms", l50.P50), fmt.Sprintf("%.2f ms", l50.P99), fmt.Sprintf("%.0f", l50.CallsPerS),
			fmt.Sprintf("%.1f MiB", r.Memory.RSS), fmt.Sprintf("%.1f MiB", r.Memory.HeapUsed), errs})
		if r.Note != "" {
			s.note("%s: %s", name, r.Note)
		}
	}
	row("gradiopool gradio (Go)", goRes, goErr)
	jsName := "@gradio/client (JS)"
	if jsRes != nil {
		jsName = fmt.Sprintf("@gradio/client %s (Node %s)", jsRes.ClientVersion, jsRes.Node)
	}
	row(jsName, jsRes, jsErr)
	s.Tables = append(s.Tables, t)
	if goRes == nil || jsRes == nil {
		return nil
	}
	g1, j1, g50, j50 := level(goRes, 1), level(jsRes, 1), level(goRes, 50), level(jsRes, 50)
	if g1.P50 > 0 && g50.P50 > 0 {
		ratio := j1.P50 / g1.P50
		s.highlight("Go client vs the official JS client, same simulated app: warm predict p50 %.3f vs %.3f ms at c=1, %.0f vs %.0f calls/s at c=50, connect p50 %.1f vs %.1f ms, RSS %.0f vs %.0f MiB.",
			g1.P50, j1.P50, g50.CallsPerS, j50.CallsPerS, goRes.Connect.P50, jsRes.Connect.P50, goRes.Memory.RSS, jsRes.Memory.RSS)
		s.Targets = append(s.Targets, Target{
			Goal: "our client's warm predict at least twice as fast as the JS client's (c=1 p50)",
			Measured: fmt.Sprintf("JS/Go = %.1f× (%.3f ms vs %.3f ms); at c=50: p50 %.1f×, calls/s %.1f×; connect p50 %.1f×; RSS %.1f×",
				ratio, j1.P50, g1.P50, j50.P50/g50.P50, g50.CallsPerS/max(0.001, j50.CallsPerS), jsRes.Connect.P50/max(0.001, goRes.Connect.P50), jsRes.Memory.RSS/max(0.001, goRes.Memory.RSS)),
			Met: ratio >= 2,
			Why: whyIf(ratio < 2, "both clients wait on the same server for most of a warm call; only the client's own share of the round trip differs"),
		})
	}
	e.addChart(s, "peers.png", "warm predict latency, Go client vs @gradio/client", func(dir, file string) error {
		return barChart(dir, file, "Warm predict latency (lower is better)", "ms", []string{"c=1 p50", "c=1 p99", "c=50 p50", "c=50 p99"},
			[]series{
				{"Go client", []float64{g1.P50, g1.P99, g50.P50, g50.P99}},
				{"@gradio/client", []float64{j1.P50, j1.P99, j50.P50, j50.P99}},
			})
	})
	return nil
}
