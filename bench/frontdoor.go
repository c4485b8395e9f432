package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// fdLatency is one latency summary of frontdoor_bench.mjs (ms).
type fdLatency struct {
	N     int      `json:"n"`
	First *float64 `json:"first"`
	P50   *float64 `json:"p50"`
	P95   *float64 `json:"p95"`
	P99   *float64 `json:"p99"`
}

// fdResult is what testdata/jsclient/frontdoor_bench.mjs prints.
type fdResult struct {
	ClientVersion string    `json:"client_version"`
	Node          string    `json:"node"`
	Connect       fdLatency `json:"connect_ms"`
	PerCall       fdLatency `json:"per_call_ms"`
	Warm          fdLatency `json:"warm_ms"`
	Errors        int       `json:"errors"`
	FirstError    *string   `json:"first_error"`
	Concurrent    *struct {
		InFlight  int       `json:"in_flight"`
		Calls     int       `json:"calls"`
		CallsPerS float64   `json:"calls_per_s"`
		Latency   fdLatency `json:"latency_ms"`
	} `json:"concurrent"`
}

// fdScript finds testdata/jsclient/frontdoor_bench.mjs with the official
// client installed beside it.
func (e *env) fdScript() (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("node is not in PATH")
	}
	js, err := e.jsScript()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(js), "frontdoor_bench.mjs")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("testdata/jsclient/frontdoor_bench.mjs is missing")
	}
	return p, nil
}

type fdSpec struct {
	PerCall, Warmup, Calls int
	Concurrent             int // > 0: one shared client, this many calls at a time
}

func runFDScript(ctx context.Context, script, url string, spec fdSpec) (*fdResult, error) {
	args := []string{filepath.Base(script), url, "--endpoint", "/upper",
		"--per-call", strconv.Itoa(max(spec.PerCall, 1)), "--warmup", strconv.Itoa(spec.Warmup), "--calls", strconv.Itoa(spec.Calls)}
	if spec.Concurrent > 0 {
		args = append(args, "--concurrent", strconv.Itoa(spec.Concurrent))
	}
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = filepath.Dir(script)
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("node %s: %v: %s", filepath.Base(script), err, lastLines(stderr.String(), 3))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r fdResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		return nil, fmt.Errorf("%s printed %q: %w", filepath.Base(script), lastLines(string(out), 2), err)
	}
	return &r, nil
}

// runFrontDoor measures the official JS client against one replica
// directly and through the gateway's Gradio front door, side by side in
// one run on the same simulated replicas.
func runFrontDoor(ctx context.Context, e *env, s *Section) error {
	connect := e.pick(500*time.Millisecond, 50*time.Millisecond)
	work := e.pick(5*time.Millisecond, time.Millisecond)
	spec := fdSpec{PerCall: e.pickInt(10, 3), Warmup: e.pickInt(20, 5), Calls: e.pickInt(300, 30)}
	s.Method = fmt.Sprintf("The official JavaScript client (`@gradio/client`, pinned in testdata/jsclient/package-lock.json) run by Node through "+
		"`testdata/jsclient/frontdoor_bench.mjs`, twice in one run: against one of three simulated replicas directly, then against the gateway's "+
		"Gradio front door in front of the same three (the gateway in the harness process over `pool.Pool` with its defaults; the replicas in a "+
		"helper process). Each replica's connect costs %s per metadata request (`ConnectCost` on `/config` and `/info`) and each call %s of work. "+
		"Per target, one call at a time: **connect per call** is %d times `Client.connect(url)` + `predict(\"/upper\")` + `close()` (what an app "+
		"that connects for every request pays; the first of them is cold); **warm** is one connected client, %d untimed calls, then %d timed "+
		"`predict(\"/upper\", [\"hello\"])` calls. The only change between the two runs is the URL.",
		connect, work, spec.PerCall, spec.Warmup, spec.Calls)
	if e.opts.Quick {
		s.Method += fmt.Sprintf(" Quick mode: %s connect cost instead of 500 ms, and few calls.", connect)
	}
	script, err := e.fdScript()
	if err != nil {
		s.notMeasured("the official JS client cannot run here: %v", err)
		return nil
	}
	sm, _, gw, stop, err := e.gatewayOverSims(ctx, simSpec{Replicas: 3, ConnectCost: connect, Latency: work})
	if err != nil {
		return err
	}
	defer stop()

	e.logf("  frontdoor: JS client straight to one replica")
	direct, derr := runFDScript(ctx, script, sm.URLs[0], spec)
	e.logf("  frontdoor: JS client through the gateway's front door")
	front, ferr := runFDScript(ctx, script, gw.URL+"/", spec)
	if derr != nil && ferr != nil {
		return fmt.Errorf("straight to a replica: %v; through the front door: %v", derr, ferr)
	}
	ms := func(v *float64) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf("%.2f ms", *v)
	}
	t := Table{Header: []string{"@gradio/client against", "connect p50 (first)", "connect + predict per call p50 (p95)",
		"warm predict p50", "warm p95", "warm p99", "calls", "errors"}}
	row := func(name string, r *fdResult, err error) {
		if r == nil {
			t.Rows = append(t.Rows, []string{name, "not measured: " + err.Error(), "", "", "", "", "", ""})
			return
		}
		errs := strconv.Itoa(r.Errors)
		if r.FirstError != nil {
			errs += " (" + *r.FirstError + ")"
		}
		t.Rows = append(t.Rows, []string{name, ms(r.Connect.P50) + " (" + ms(r.Connect.First) + ")", ms(r.PerCall.P50) + " (" + ms(r.PerCall.P95) + ")",
			ms(r.Warm.P50), ms(r.Warm.P95), ms(r.Warm.P99), strconv.Itoa(r.PerCall.N + r.Warm.N), errs})
	}
	row("one replica, directly", direct, derr)
	row("the gateway's Gradio front door (3 replicas)", front, ferr)
	s.Tables = append(s.Tables, t)
	if direct == nil || front == nil {
		return nil
	}
	s.note("@gradio/client %s on Node %s.", front.ClientVersion, front.Node)
	if direct.Warm.P50 == nil || front.Warm.P50 == nil || direct.PerCall.P50 == nil || front.PerCall.P50 == nil {
		return nil
	}
	dw, fw, dp, fp := *direct.Warm.P50, *front.Warm.P50, *direct.PerCall.P50, *front.PerCall.P50
	s.highlight("Official JS client, warm `predict` p50: %.2f ms through the front door vs %.2f ms straight to one replica (difference %+.2f ms: the gateway hop). "+
		"Connecting per call costs %.1f ms per call straight to a replica and %.1f ms through the front door (the gateway answers `/config` and `/info` "+
		"from its connected pool): %.0f× and %.0f× a warm call through the front door.",
		fw, dw, fw-dw, dp, fp, dp/max(fw, 0.001), fp/max(fw, 0.001))
	val := func(v *float64) float64 {
		if v == nil {
			return 0
		}
		return *v
	}
	if err := runFrontDoorSpread(ctx, e, s, script); err != nil {
		s.note("Per-call spreading not measured: %v", err)
	}
	e.addChart(s, "frontdoor.png", "official JS client: one replica directly vs the gateway's front door", func(dir, file string) error {
		return barChart(dir, file, "@gradio/client latency (lower is better)", "ms", []string{"connect + predict per call p50", "warm p50", "warm p95"},
			[]series{
				{"one replica directly", []float64{val(direct.PerCall.P50), val(direct.Warm.P50), val(direct.Warm.P95)}},
				{"gateway front door", []float64{val(front.PerCall.P50), val(front.Warm.P50), val(front.Warm.P95)}},
			})
	})
	return nil
}

// runFrontDoorSpread measures one shared JS client making calls several
// at a time over three replicas that run one call at a time (Gradio's
// default): straight to one replica vs through the front door, which
// spreads the calls of the client's one session over the replicas.
func runFrontDoorSpread(ctx context.Context, e *env, s *Section, script string) error {
	const inFlight = 10
	work := e.pick(50*time.Millisecond, 20*time.Millisecond)
	spec := fdSpec{Warmup: e.pickInt(30, 10), Calls: e.pickInt(300, 60), Concurrent: inFlight}
	sm, _, gw, stop, err := e.gatewayOverSims(ctx, simSpec{Replicas: 3, Latency: work, Concurrency: 1})
	if err != nil {
		return err
	}
	defer stop()
	e.logf("  frontdoor: one shared JS client, %d calls at a time, straight to one replica", inFlight)
	direct, derr := runFDScript(ctx, script, sm.URLs[0], spec)
	e.logf("  frontdoor: one shared JS client, %d calls at a time, through the front door", inFlight)
	front, ferr := runFDScript(ctx, script, gw.URL+"/", spec)
	t := Table{Caption: fmt.Sprintf("**Per-call spreading.** One shared connected client (as a Next.js server keeps one for its anonymous traffic) "+
		"making `predict(\"/upper\")` calls %d at a time: %d untimed, then %d timed; the three replicas run `/upper` one call at a time "+
		"(Gradio's default concurrency), %s of work each. Through the front door each call of the client's one session goes to the least "+
		"loaded replica (`/upper` has no `gr.State`).", inFlight, spec.Warmup, spec.Calls, work),
		Header: []string{"one shared @gradio/client, 10 calls at a time, against", "calls/s", "latency p50", "p95", "p99", "calls", "errors"}}
	ms := func(v *float64) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf("%.1f ms", *v)
	}
	row := func(name string, r *fdResult, err error) {
		if r == nil || r.Concurrent == nil {
			if err == nil {
				err = fmt.Errorf("no result")
			}
			t.Rows = append(t.Rows, []string{name, "not measured: " + err.Error(), "", "", "", "", ""})
			return
		}
		c := r.Concurrent
		errs := strconv.Itoa(r.Errors)
		if r.FirstError != nil {
			errs += " (" + *r.FirstError + ")"
		}
		t.Rows = append(t.Rows, []string{name, fmt.Sprintf("%.1f", c.CallsPerS), ms(c.Latency.P50), ms(c.Latency.P95), ms(c.Latency.P99),
			strconv.Itoa(c.Calls), errs})
	}
	row("one replica, directly", direct, derr)
	row("the gateway's Gradio front door (3 replicas)", front, ferr)
	s.Tables = append(s.Tables, t)
	if direct == nil || front == nil || direct.Concurrent == nil || front.Concurrent == nil || direct.Concurrent.CallsPerS <= 0 {
		return nil
	}
	ratio := front.Concurrent.CallsPerS / direct.Concurrent.CallsPerS
	s.highlight("One shared JS client, %d calls at a time, replicas at concurrency 1: %.1f calls/s through the front door over three replicas vs %.1f straight to one (%.2f×).",
		inFlight, front.Concurrent.CallsPerS, direct.Concurrent.CallsPerS, ratio)
	s.Targets = append(s.Targets, Target{
		Goal:     "one shared JS client, 10 calls at a time over three replicas at concurrency 1: at least 2.5× the calls/s of one replica",
		Measured: fmt.Sprintf("%.2f× (%.1f vs %.1f calls/s)", ratio, front.Concurrent.CallsPerS, direct.Concurrent.CallsPerS),
		Met:      ratio >= 2.5,
	})
	return nil
}
