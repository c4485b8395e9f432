package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/gradiopool/gradiopool/internal/demo"
)

// runDemo is `gradiopool demo`: flags, then demo.Run.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts demo.Options
	fs.BoolVar(&opts.Quick, "quick", false, "a smaller, faster workload (a few seconds; used by the tests)")
	fs.BoolVar(&opts.Verbose, "verbose", false, "write the gateway's and pool's logs to stderr (text)")
	fs.DurationVar(&opts.Keep, "keep", 0, "after the summary, keep serving the gateway and its dashboard (/admin) this long, e.g. 10m")
	fs.StringVar(&opts.JSClientDir, "jsclient", "", "directory with testdata/jsclient (demo.mjs, npm ci done) for the official JS client step; default: testdata/jsclient found from the working directory up")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gradiopool demo [--quick] [--keep 10m] [--verbose] [--jsclient DIR]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "The whole system on this machine, without network: three simulated Gradio")
		fmt.Fprintln(stderr, "replicas registered as the seed's Spaces, the gateway in front of them, and a")
		fmt.Fprintln(stderr, "workload of registered and anonymous users (short calls, generator streams,")
		fmt.Fprintln(stderr, "the Gradio REST shape, long calls, one replica crashing midway), then a")
		fmt.Fprintln(stderr, "summary: first vs warm call latency, failovers, sticky users, metrics and the")
		fmt.Fprintln(stderr, "pool-stats JSON. Last, the official JS client (@gradio/client) calls the")
		fmt.Fprintln(stderr, "gateway's Gradio front door when Node 20+ and testdata/jsclient/node_modules")
		fmt.Fprintln(stderr, "are there (`make demo` runs npm ci for it). Exits non-zero when a step fails.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: demo takes no arguments, got %q", errUsage, fs.Args())
	}
	return demo.Run(ctx, opts, stdout, stderr)
}
