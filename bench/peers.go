//go:build benchwip

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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// peerSpec is what a peer client run does; the JS script gets the same
// JSON as its only argument.
type peerSpec struct {
	URL         string `json:"url"`
	Endpoint    string `json:"endpoint"`
	Connects    int    `json:"connects"`    // timed connects (a fresh client each)
	Warmup      int    `json:"warmup"`      // untimed calls before the timed ones
	N1          int    `json:"n1"`          // sequential timed calls
	N50         int    `json:"n50"`         // timed calls at concurrency Conc
	Concurrency int    `json:"concurrency"` // 50
}

// peerResult is what a peer run prints: one JSON object.
type peerResult struct {
	Client       string    `json:"client"`
	ConnectMs    []float64 `json:"connect_ms"`
	C1Ms         []float64 `json:"c1_ms"`
	CNMs         []float64 `json:"cn_ms"`
	CNElapsedMs  float64   `json:"cn_elapsed_ms"`
	Errors       int       `json:"errors"`
	FirstError   string    `json:"first_error,omitempty"`
	RSSBytes     float64   `json:"rss_bytes"`      // resident set after the runs
	PeakRSSBytes float64   `json:"peak_rss_bytes"` // high-water mark, 0 if unknown
	HeapBytes    float64   `json:"heap_bytes"`     // live heap (Go: HeapAlloc after GC; JS: heapUsed)
	Note         string    `json:"note,omitempty"`
}

// runPeerGo measures our Go client the way the JS script measures its own.
func runPeerGo(ctx context.Context, spec peerSpec) (*peerResult, error) {
	res := &peerResult{Client: "gradiopool gradio (Go)"}
	var c *gradio.Client
	for i := range spec.Connects {
		t0 := time.Now()
		nc, err := gradio.Connect(ctx, spec.URL)
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		res.ConnectMs = append(res.ConnectMs, msf(time.Since(t0)))
		if i < spec.Connects-1 {
			nc.Close()
		}
		c = nc
	}
	defer c.Close()
	var mu sync.Mutex
	call := func() (float64, bool) {
		t0 := time.Now()
		_, err := c.Predict(ctx, spec.Endpoint, "hello")
		d := msf(time.Since(t0))
		if err != nil {
			mu.Lock()
			res.Errors++
			if res.FirstError == "" {
				res.FirstError = err.Error()
			}
			mu.Unlock()
			return 0, false
		}
		return d, true
	}
	for range spec.Warmup {
		call()
	}
	for range spec.N1 {
		if d, ok := call(); ok {
			res.C1Ms = append(res.C1Ms, d)
		}
	}
	per := spec.N50 / spec.Concurrency
	var wg sync.WaitGroup
	t0 := time.Now()
	for range spec.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				if d, ok := call(); ok {
					mu.Lock()
					res.CNMs = append(res.CNMs, d)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	res.CNElapsedMs = msf(time.Since(t0))
	m := ReadMem()
	res.HeapBytes = float64(m.HeapAlloc)
	res.RSSBytes, res.PeakRSSBytes = procRSS()
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
	for _, name := range []string{"bench-js.mjs"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no JS benchmark script in testdata/jsclient")
}

func runPeerJS(ctx context.Context, script string, spec peerSpec) (*peerResult, error) {
	b, _ := json.Marshal(spec)
	cmd := exec.CommandContext(ctx, "node", "--expose-gc", filepath.Base(script), string(b))
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

func msSummary(v []float64) Summary {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x * float64(time.Millisecond))
	}
	return Summarize(d, nil)
}

func runPeers(ctx context.Context, e *env, s *Section) error {
	s.Method = "The official JavaScript client (`@gradio/client`, the version pinned in testdata/jsclient/package-lock.json, run by Node) " +
		"and our Go client (`gradio.Connect` + `Predict`), each in a process of its own, against the same simulated replica " +
		"(its own process, instant handler, unlimited concurrency), one after the other with the same workload: " +
		"timed connects (a fresh client each), then warm `predict(\"/upper\", [\"hello\"])` calls one at a time, " +
		"then at concurrency 50 (50 concurrent calls on one client, as an app server would share it). Memory is each process's resident set " +
		"after the runs (and its live heap: Go `HeapAlloc` after GC, JS `heapUsed`)."
	spec := peerSpec{Endpoint: "upper", Connects: e.pickInt(10, 3), Warmup: 20,
		N1: e.pickInt(500, 100), N50: e.pickInt(5000, 500), Concurrency: 50}
	script, jsErr := e.jsScript()
	sm, err := e.startSims(ctx, simSpec{Replicas: 1}, true)
	if err != nil {
		return err
	}
	defer sm.Close()
	spec.URL = sm.URLs[0]
	if !sm.Remote {
		s.note("the simulated replica ran inside the harness process (no helper-process command), so it shares the CPU with the Go client when that runs in-process too")
	}
	var goRes, jsRes *peerResult
	var goErr error
	e.logf("  peers: Go client")
	if len(e.opts.Self) > 0 {
		goRes, goErr = e.runPeerGoChild(ctx, spec)
	} else {
		goRes, goErr = runPeerGo(ctx, spec)
		if goRes != nil {
			goRes.Note = "measured inside the harness process: RSS includes the harness"
		}
	}
	if jsErr == nil {
		e.logf("  peers: JS client (node %s)", filepath.Base(script))
		jsRes, jsErr = runPeerJS(ctx, script, spec)
	}
	if goErr != nil && jsErr != nil {
		return fmt.Errorf("the Go client: %v; the JS client: %v", goErr, jsErr)
	}
	t := Table{Header: []string{"client", "connect p50", "warm c=1 p50", "c=1 p99", "c=50 p50", "c=50 p99", "calls/s at c=50", "RSS", "heap", "errors"}}
	row := func(r *peerResult) ([]string, Summary, Summary, float64) {
		con, c1, cn := msSummary(r.ConnectMs), msSummary(r.C1Ms), msSummary(r.CNMs)
		rate := float64(len(r.CNMs)) / (r.CNElapsedMs / 1000)
		errs := fmt.Sprint(r.Errors)
		if r.FirstError != "" {
			errs += " (" + r.FirstError + ")"
		}
		return []string{r.Client, ms(con.P50), ms(c1.P50), ms(c1.P99), ms(cn.P50), ms(cn.P99), fmt.Sprintf("%.0f", rate), mib(r.RSSBytes), mib(r.HeapBytes), errs}, c1, cn, rate
	}
	var goC1, jsC1, goCN, jsCN Summary
	var goRate, jsRate float64
	if goRes != nil {
		var r []string
		r, goC1, goCN, goRate = row(goRes)
		t.Rows = append(t.Rows, r)
		if goRes.Note != "" {
			s.note("Go client: %s", goRes.Note)
		}
	} else {
		t.Rows = append(t.Rows, []string{"gradiopool gradio (Go)", "not measured: " + goErr.Error(), "", "", "", "", "", "", "", ""})
	}
	if jsRes != nil {
		var r []string
		r, jsC1, jsCN, jsRate = row(jsRes)
		t.Rows = append(t.Rows, r)
	} else {
		t.Rows = append(t.Rows, []string{"@gradio/client (JS)", "not measured: " + jsErr.Error(), "", "", "", "", "", "", "", ""})
	}
	s.Tables = append(s.Tables, t)
	if goRes != nil && jsRes != nil && goC1.P50 > 0 {
		ratio := float64(jsC1.P50) / float64(goC1.P50)
		s.Targets = append(s.Targets, Target{
			Goal:     "our client's warm predict at least twice as fast as the JS client's (c=1 p50)",
			Measured: fmt.Sprintf("JS/Go = %.1f× (%s vs %s); at c=50 p50 %.1f×, calls/s %.1f×", ratio, ms(jsC1.P50), ms(goC1.P50), float64(jsCN.P50)/float64(max(1, goCN.P50)), goRate/max(1, jsRate)),
			Met:      ratio >= 2,
			Why:      whyIf(ratio < 2, "both clients wait on the same server for most of a warm call; the client's own share of the round trip is what differs"),
		})
		e.addChart(s, "peers.png", "warm predict latency, Go client vs @gradio/client", func(dir, file string) error {
			return barChart(dir, file, "Warm predict latency (lower is better)", "ms", []string{"c=1 p50", "c=1 p99", "c=50 p50", "c=50 p99"},
				[]series{
					{"Go client", []float64{msf(goC1.P50), msf(goC1.P99), msf(goCN.P50), msf(goCN.P99)}},
					{"@gradio/client", []float64{msf(jsC1.P50), msf(jsC1.P99), msf(jsCN.P50), msf(jsCN.P99)}},
				})
		})
	}
	return nil
}
