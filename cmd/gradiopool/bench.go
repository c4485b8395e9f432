package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gradiopool/gradiopool/bench"
)

// runBench runs the benchmark harness (package bench) and writes the report.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// The harness re-runs this executable for its helper processes
	// (simulated replicas, the Go client peer); they are told apart by
	// environment, not by flags.
	if handled, err := bench.RunChild(ctx, stdout); handled {
		return err
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "scaled-down times and short runs (under a minute; CI smoke test)")
	out := fs.String("out", bench.DefaultOut, "report path; charts go to a bench/ directory beside it")
	only := fs.String("only", "", "comma-separated section ids to run (headline,overhead,throughput,scale,peers,frontdoor,poolbench,routing,warmup,cluster); empty = all")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gradiopool bench [--quick] [--out docs/BENCHMARKS.md] [--only ids]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Measures the pool, the gateway and the Go client against simulated replicas")
		fmt.Fprintln(stderr, "and writes a Markdown report with PNG charts. Progress goes to stderr.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: bench takes no arguments, got %q", errUsage, fs.Args())
	}
	opts := bench.Options{Quick: *quick, Out: *out, Progress: stderr}
	if exe, err := os.Executable(); err == nil {
		opts.Self = []string{exe, "bench"}
	}
	if *only != "" {
		opts.Only = strings.Split(*only, ",")
	}
	if err := bench.Run(ctx, opts); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", *out)
	return nil
}
