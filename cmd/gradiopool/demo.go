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
