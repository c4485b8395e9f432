// Command gradiopool-bench is the benchmark harness (package bench): it
// measures the pool, the gateway and the Go client against simulated
// replicas and writes docs/BENCHMARKS.md with its charts. It is a command of
// its own, not a subcommand of gradiopool, so that the serve binary links
// no plotting, font or PDF code (gonum/plot and its dependencies).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gradiopool/gradiopool/bench"
)

// errUsage marks an error whose message is a usage problem; main exits 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gradiopool-bench:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run runs the benchmark harness (package bench) and writes the report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// The harness re-runs this executable for its helper processes
	// (simulated replicas, the Go client peer); they are told apart by
	// environment, not by flags.
	if handled, err := bench.RunChild(ctx, stdout); handled {
		return err
	}
	if len(args) > 0 && args[0] == "autoscale" {
		return runAutoscale(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("gradiopool-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "scaled-down times and short runs (under a minute; CI smoke test)")
	out := fs.String("out", bench.DefaultOut, "report path; charts go to a bench/ directory beside it")
	only := fs.String("only", "", "comma-separated section ids to run (headline,overhead,throughput,scale,peers,frontdoor,poolbench,routing,warmup,cluster); empty = all")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gradiopool-bench [--quick] [--out docs/BENCHMARKS.md] [--only ids]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Measures the pool, the gateway and the Go client against simulated replicas")
		fmt.Fprintln(stderr, "and writes a Markdown report with PNG charts. Progress goes to stderr.")
		fmt.Fprintln(stderr, "`make bench` runs it from the repository root.")
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
		return fmt.Errorf("%w: gradiopool-bench takes no arguments, got %q", errUsage, fs.Args())
	}
	opts := bench.Options{Quick: *quick, Out: *out, Progress: stderr}
	if exe, err := os.Executable(); err == nil {
		opts.Self = []string{exe}
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
