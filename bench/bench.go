package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"
)

// DefaultOut is where the report goes when Options.Out is empty.
const DefaultOut = "docs/BENCHMARKS.md"

// Options configures a run. The zero value is a full run writing
// DefaultOut with no progress output.
type Options struct {
	// Quick scales times down and shortens every run so that the whole
	// report takes under a minute (CI smoke use). Its figures are not the
	// reference figures, and the report says so.
	Quick bool
	// Out is the report's path; charts go to a "bench" directory beside it.
	// Empty means DefaultOut.
	Out string
	// Progress receives one line per step while the run goes on; nil means
	// silent.
	Progress io.Writer
	// ModuleDir is the gradiopool source tree, needed by the sections that
	// run `go test -bench` and `node testdata/jsclient/...`. Empty means:
	// search upwards from the working directory for gradiopool's go.mod.
	ModuleDir string
	// Only, when non-empty, runs only the sections with these IDs
	// (headline, overhead, throughput, scale, peers, frontdoor, poolbench,
	// routing, warmup, cluster); the others
	// are reported as skipped.
	Only []string
	// Self is a command that re-runs this program so that it calls
	// [RunChild] first (cmd/gradiopool-bench passes its own executable). The
	// harness uses it to run the simulated replicas, the Go client peer and
	// the gateway's HTTP callers in processes of their own. Nil means
	// everything runs in this process (and the parts that need a process of
	// their own say "not measured"), and the report says so.
	Self []string
}

// section is one figure of the report.
type section struct {
	id, title string
	run       func(ctx context.Context, e *env, s *Section) error
}

// sections lists the report's figures in order.
var sections = []section{
	{"headline", "Connect per call vs pooled (the seed's headline)", runHeadline},
	{"overhead", "Overhead: client direct vs pool library vs gateway", runOverhead},
	{"throughput", "Throughput and saturation through the gateway", runThroughput},
	{"scale", "Scale: calls in flight, waiters, user assignments", runScale},
	{"peers", "Peers: the official JS client beside our Go client", runPeers},
	{"frontdoor", "Front door: the official JS client through the gateway vs one replica", runFrontDoor},
	{"poolbench", "Pool micro-benchmark beside jackc/puddle/v2", runPoolBench},
	{"routing", "Routing by the Space's own queue vs by our in-use count", runRouting},
	{"warmup", "Demand warm-up: a burst from 0 to 40 calls in flight", runWarmup},
	{"cluster", "Several gateways on Redis: the cost of shared limits", runCluster},
}

// env is what the sections share.
type env struct {
	opts     Options
	chartDir string // where the PNGs go: "bench" beside the report
	modDir   string // "" when the source tree was not found
	progress io.Writer

	// Results that parts of a section hand to the section's target.
	inFlightPool, inFlightGateway *perCallMem
	// Goroutines started per call in flight, by start function (the last
	// repetition's).
	inFlightPoolCensus, inFlightGatewayCensus map[string]int
	// The most calls/s measured through the gateway (0: not measured).
	maxGateway float64
}

// perCallMem is the memory one call in flight holds, in bytes.
type perCallMem struct {
	Heap, Stack, Goroutines float64
}

func newPerCallMem(d MemDelta, calls int) *perCallMem {
	n := float64(calls)
	return &perCallMem{Heap: float64(d.Heap) / n, Stack: float64(d.Stack) / n, Goroutines: float64(d.Goroutines) / n}
}

func (m *perCallMem) Total() float64 { return m.Heap + m.Stack }

func (m *perCallMem) String() string {
	return fmt.Sprintf("%s per call: %s heap + %s stacks, %.1f goroutines", kib(m.Total()), kib(m.Heap), kib(m.Stack), m.Goroutines)
}

// pick returns full in a full run and quick in quick mode. Under the race
// detector (the quick-mode test in CI), which slows every call several
// times, quick durations are halved so the test stays short.
func (e *env) pick(full, quick time.Duration) time.Duration {
	if e.opts.Quick {
		if raceEnabled {
			return quick / 2
		}
		return quick
	}
	return full
}

func (e *env) pickInt(full, quick int) int {
	if e.opts.Quick {
		return quick
	}
	return full
}

func (e *env) logf(format string, args ...any) {
	if e.progress != nil {
		fmt.Fprintf(e.progress, "bench: "+format+"\n", args...)
	}
}

// Run measures every section and writes the report and its charts.
func Run(ctx context.Context, opts Options) error {
	for _, id := range opts.Only {
		known := false
		for _, sec := range sections {
			known = known || sec.id == id
		}
		if !known {
			var ids []string
			for _, sec := range sections {
				ids = append(ids, sec.id)
			}
			return fmt.Errorf("bench: unknown section %q (sections: %s)", id, strings.Join(ids, ", "))
		}
	}
	out := opts.Out
	if out == "" {
		out = DefaultOut
	}
	chartDir := filepath.Join(filepath.Dir(out), "bench")
	if err := os.MkdirAll(chartDir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	e := &env{opts: opts, chartDir: chartDir, progress: opts.Progress}
	e.modDir = opts.ModuleDir
	if e.modDir == "" {
		e.modDir = findModule()
	}
	r := &Report{Quick: opts.Quick, Started: time.Now(), Machine: readMachine(ctx), HelperProcesses: len(opts.Self) > 0}
	e.logf("machine: %d CPUs, %s, load %s", r.Machine.NumCPU, r.Machine.GoVersion, r.Machine.Load)
	for i, sec := range sections {
		s := &Section{ID: sec.id, Title: sec.title}
		r.Sections = append(r.Sections, s)
		if len(opts.Only) > 0 && !contains(opts.Only, sec.id) {
			s.notMeasured("skipped in this run (--only)")
			continue
		}
		if err := ctx.Err(); err != nil {
			s.notMeasured("the run was interrupted before this section")
			continue
		}
		e.logf("[%d/%d] %s ...", i+1, len(sections), sec.title)
		t0 := time.Now()
		err := runSection(ctx, e, sec, s)
		if err != nil {
			e.logf("[%d/%d] %s: %v", i+1, len(sections), sec.id, err)
			if s.NotMeasured == "" {
				s.notMeasured("%v", err)
			}
		}
		e.logf("[%d/%d] %s done in %s", i+1, len(sections), sec.id, time.Since(t0).Round(100*time.Millisecond))
	}
	r.Elapsed = time.Since(r.Started)
	r.LoadAtEnd = readMachine(ctx).Load
	var b strings.Builder
	if err := r.WriteMarkdown(&b, "bench"); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	e.logf("wrote %s and %s/*.png in %s", out, chartDir, r.Elapsed.Round(time.Second))
	return ctx.Err()
}

// runSection runs one section, turning a panic into an error so that one
// broken dependency cannot take the whole report down.
func runSection(ctx context.Context, e *env, sec section, s *Section) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
			if e.progress != nil {
				fmt.Fprintf(e.progress, "%s\n", debug.Stack())
			}
		}
	}()
	return sec.run(ctx, e, s)
}

// findModule looks upwards from the working directory for gradiopool's
// go.mod.
func findModule() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/gradiopool/gradiopool\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// errNoSource is returned by sections that need the source tree.
var errNoSource = errors.New("needs the gradiopool source tree (run from inside it, or set Options.ModuleDir)")

func (e *env) pickDurString(full, quick string) string {
	if e.opts.Quick {
		return quick
	}
	return full
}

func (e *env) numCPU() int { return readMachineCPU() }
