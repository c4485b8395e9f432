// Package bench is the benchmark harness behind `gradiopool bench`: it starts
// simulated Gradio replicas (package gradiotest), drives the Go client, the
// pool library and the HTTP gateway against them, and writes a Markdown report
// with PNG charts (docs/BENCHMARKS.md and docs/bench/*.png).
//
//	err := bench.Run(ctx, bench.Options{
//		Quick:    true,                 // scaled-down times, finishes in under a minute
//		Out:      "docs/BENCHMARKS.md", // charts go to docs/bench/
//		Progress: os.Stderr,
//	})
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
package bench
