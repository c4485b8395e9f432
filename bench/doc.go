// Package bench is the benchmark harness behind `gradiopool-bench`
// (cmd/gradiopool-bench, `make bench`). It starts
// simulated Gradio replicas (package gradiotest), drives the Go client, the
// pool library and the HTTP gateway against them, and writes a Markdown report
// with PNG charts (docs/BENCHMARKS.md and docs/bench/*.png).
//
//	func main() {
//		// Helper processes are re-runs of this executable: let them in first.
//		if handled, err := bench.RunChild(ctx, os.Stdout); handled { ... }
//		exe, _ := os.Executable()
//		err := bench.Run(ctx, bench.Options{
//			Quick:    true,                 // scaled-down times, finishes in under a minute
//			Out:      "docs/BENCHMARKS.md", // charts go to docs/bench/
//			Progress: os.Stderr,
//			Self:     []string{exe},
//		})
//	}
//
// `gradiopool-bench [--quick] [--out FILE] [--only ids]` does exactly this.
//
// # Honesty rules
//
// Every figure in the report is measured in the same run, side by side, and
// reported as a ratio where the machine's noise would make absolute numbers
// meaningless (the reference machine is a shared 2-core VM). A section whose
// dependency is missing, or that fails, says "not measured: <why>" instead of
// showing a number. Targets are reported as met or missed, with the measured
// value beside the goal.
//
// # Measurement tools
//
//   - [Recorder] keeps every latency sample; percentiles are nearest-rank on
//     the sorted samples (no histograms, no interpolation).
//   - [OpenLoop] paces calls at a fixed rate whatever the latency, and measures
//     each call from the moment it was due, so a slow system cannot hide its
//     queueing by slowing the load down (no coordinated omission).
//   - [ReadMem] reads runtime.MemStats after two forced garbage collections,
//     so heap figures are live data, not garbage waiting to be collected.
//
// # Helper processes
//
// Where a figure must belong to one program only, the harness runs the
// other parties in processes of their own, by re-running its own executable
// with [ChildEnv] set (see [RunChild]): the simulated replicas (for the
// memory of calls in flight and for the client peers), our Go client when it
// is compared with the JS client (run by Node), and the HTTP callers of the
// gateway. Without Options.Self everything runs in one process and the report
// says where that matters.
package bench
