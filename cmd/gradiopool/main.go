// Command gradiopool is the gateway, demo, client and simulator of the
// gradiopool project. Every subcommand is a thin layer over a package: flags
// in, a call into gateway, pool, gradio or gradiotest, output out.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand: it runs until done or until ctx ends (SIGINT or
// SIGTERM), writing its output to stdout and diagnostics to stderr.
type command struct {
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	summary string
}

var commands = map[string]command{
	"demo":    {runDemo, "run the whole system on simulated replicas and print a summary"},
	"serve":   {runServe, "run the HTTP gateway in front of Gradio replicas"},
	"call":    {runCall, "call one endpoint of a Gradio app and print the outputs as JSON"},
	"sim":     {runSim, "run simulated Gradio replicas and a Hugging Face Hub emulation"},
	"health":  {runHealth, "ask a running gateway's /healthz; exit 0 on 200 (the container HEALTHCHECK)"},
	"version": {runVersion, "print the version, VCS revision and Go version of this build"},
}

// order fixes the order of the usage text.
var order = []string{"demo", "serve", "call", "sim", "health", "version"}

// errUsage marks an error whose message is a usage problem; main exits 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gradiopool:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return fmt.Errorf("%w: no command given", errUsage)
		}
		return nil
	}
	if args[0] == "--version" || args[0] == "-version" {
		return runVersion(ctx, args[1:], stdout, stderr)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		usage(stderr)
		return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: gradiopool <command> [flags]")
	fmt.Fprintln(w)
	for _, name := range order {
		fmt.Fprintf(w, "  %-7s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'gradiopool <command> -h' for the flags of a command.")
}
