package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/gradiopool/gradiopool/internal/version"
)

// runVersion prints which build this is (also `gradiopool --version`).
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gradiopool version   (or gradiopool --version)")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Prints the module version, the VCS revision and commit time, and the Go")
		fmt.Fprintln(stderr, "version of this binary, read from the build information Go embeds. `make build`")
		fmt.Fprintln(stderr, "stamps the version from `git describe`; a plain `go build` in a clone gets a")
		fmt.Fprintln(stderr, "pseudo-version from the commit. The same values are exported as the")
		fmt.Fprintln(stderr, "gradiopool_build_info metric.")
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: version takes no arguments, got %q", errUsage, fs.Args())
	}
	fmt.Fprintln(stdout, version.Get())
	return nil
}
