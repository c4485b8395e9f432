package bench_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/bench"
)

func TestMain(m *testing.M) {
	// The quick run re-runs this test binary for its helper processes.
	if handled, err := bench.RunChild(context.Background(), os.Stdout); handled {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// TestQuickReport runs the whole harness in quick mode and checks the shape
// of the report: every section is there, with figures or with the reason it
// has none, and every chart it names exists. It asserts nothing about
// timings.
func TestQuickReport(t *testing.T) {
	if testing.Short() {
		t.Skip("the quick benchmark report takes about 30 s; make test runs it (no -short)")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "BENCHMARKS.md")
	var progress strings.Builder
	var w io.Writer = &progress
	if testing.Verbose() {
		w = io.MultiWriter(&progress, os.Stderr)
	}
	err := bench.Run(t.Context(), bench.Options{
		Quick:    true,
		Out:      out,
		Progress: w,
		Self:     []string{os.Args[0]},
	})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	for _, want := range []string{
		"# gradiopool benchmarks", "## Targets", "CPUs (`nproc`)", "| Go |",
		"Connect per call vs pooled", "Overhead: client direct vs pool library vs gateway",
		"Throughput and saturation", "Scale: calls in flight, waiters, user assignments",
		"Peers: the official JS client", "Front door: the official JS client through the gateway", "Pool micro-benchmark beside jackc/puddle/v2",
		"## How to rerun",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Each section has either figures (a table) or says why not.
	for _, sec := range strings.Split(report, "<a id=")[1:] {
		title, _, _ := strings.Cut(sec, "\n\n")
		if !strings.Contains(sec, "\n| ") && !strings.Contains(sec, "Not measured:") {
			t.Errorf("section %s has neither a table nor a \"Not measured\" line", title)
		}
	}
	// Every chart the report links to exists and is a PNG.
	for _, line := range strings.Split(report, "\n") {
		if !strings.HasPrefix(line, "![") {
			continue
		}
		_, rest, _ := strings.Cut(line, "](")
		name := strings.TrimSuffix(rest, ")")
		png, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("chart %s: %v", name, err)
			continue
		}
		if !strings.HasPrefix(string(png), "\x89PNG") {
			t.Errorf("chart %s is not a PNG", name)
		}
	}
	// CI installs Node and the pinned JS client: then the peer comparison
	// must have run.
	if os.Getenv("GRADIOPOOL_REQUIRE_NODE") == "1" {
		_, peers, _ := strings.Cut(report, `<a id="peers">`)
		peers, _, _ = strings.Cut(peers, "<a id=")
		if strings.Contains(peers, "not measured") || strings.Contains(peers, "Not measured") {
			t.Errorf("GRADIOPOOL_REQUIRE_NODE=1 but the JS client peer was not measured")
		}
		_, fd, _ := strings.Cut(report, `<a id="frontdoor">`)
		fd, _, _ = strings.Cut(fd, "<a id=")
		if strings.Contains(fd, "not measured") || strings.Contains(fd, "Not measured") || !strings.Contains(fd, "| the gateway's Gradio front door (3 replicas) | ") {
			t.Errorf("GRADIOPOOL_REQUIRE_NODE=1 but the JS client through the front door was not measured:\n%s", fd)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s\nprogress:\n%s", report, progress.String())
	}
}

func TestUnknownSection(t *testing.T) {
	err := bench.Run(t.Context(), bench.Options{Quick: true, Out: filepath.Join(t.TempDir(), "B.md"), Only: []string{"nope"}})
	if err == nil || !strings.Contains(err.Error(), `unknown section "nope"`) {
		t.Errorf("Run(Only: nope) = %v, want an unknown-section error", err)
	}
}

// TestOnlyWritesTheOthersAsSkipped runs one cheap section and checks that the
// others are reported as skipped, not silently dropped.
func TestOnlyWritesTheOthersAsSkipped(t *testing.T) {
	out := filepath.Join(t.TempDir(), "B.md")
	if err := bench.Run(t.Context(), bench.Options{Quick: true, Out: out, Only: []string{"poolbench"}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "skipped in this run (--only)"); n < 5 {
		t.Errorf("%d sections marked skipped, want 5:\n%s", n, b)
	}
}
