package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
)

// runServe is `gradiopool serve [--config FILE] [flags]`: the HTTP gateway.
// Configuration: the YAML file (--config, or $GRADIOPOOL_CONFIG), then the
// environment, then flags; secrets only from the environment. On SIGTERM or
// SIGINT it drains (see gateway.Gateway.Serve) and returns nil; SIGHUP
// reloads the configuration (see gateway.Gateway.Reload).
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration file [env "+gateway.ConfigEnvFile+"]")
	check := fs.Bool("check", false, "check what serve checks at start, connect once to every replica, print a table and exit (non-zero on any error)")
	apply := gateway.Flags(fs)
	fs.Usage = func() { serveUsage(fs, stderr) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: serve takes no arguments, got %q", errUsage, fs.Args())
	}
	// A misspelt GRADIOPOOL_ variable would otherwise be ignored without a
	// word (the environment is read once: a reload cannot change it).
	if err := gateway.CheckEnviron(os.Environ()); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	load := func() (gateway.Config, error) { return loadServeConfig(*configPath, os.LookupEnv, apply) }
	cfg, err := load()
	if err != nil {
		return err
	}
	if *check {
		return runCheck(ctx, cfg, stdout, stderr)
	}
	logger, err := gateway.NewLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	shutdownTracing, tracing, err := gateway.SetupTracing(ctx) // OTEL_* environment; off when unset
	if err != nil {
		return err
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(tctx) // flushes the last spans
	}()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	logger.Info("starting gateway", slog.Any("config", cfg), slog.Bool("tracing", tracing))
	if cfg.Secrets.AdminToken == "" {
		logger.Warn("GRADIOPOOL_ADMIN_TOKEN is not set: /admin, /api/admin/* and /metrics are open")
	}
	if len(cfg.Secrets.APIKeys) == 0 {
		logger.Warn("GRADIOPOOL_API_KEYS is not set: the call endpoints are open")
	}
	return serveOn(ctx, cfg, ln, logger, load)
}

// essentialFlags are the flags `serve -h` lists first: what a first
// deployment sets.
var essentialFlags = []string{"config", "check", "replicas", "listen", "max-connections", "min-connections", "queue-timeout", "log-level"}

// flagSections are the groups of the other flags, by the section of their
// key (the part before the dot; "" the gateway's own keys).
var flagSections = []struct{ section, title string }{
	{"pool", "Pool: sessions, waiting, health, routing (pool.*)"},
	{"", "Gateway: upstream connections, bodies, drain, results kept, bounds per client"},
	{"frontdoor", "Gradio front door (frontdoor.*)"},
	{"cluster", "Several gateways through Redis (cluster.*)"},
	{"autoscale", "Spaces parked when idle and woken ahead of demand (autoscale.*)"},
	{"log", "Logs (log.*)"},
}

// serveUsage is `serve -h`: what serve does, the essential flags, then
// every other flag grouped by the section of its key.
func serveUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintln(w, "usage: gradiopool serve [--config FILE] [--check] [flags]")
	fmt.Fprintln(w, "\nRuns the HTTP gateway in front of the replicas until SIGTERM or SIGINT, then")
	fmt.Fprintln(w, "drains (calls in flight finish, up to drain_timeout). With --check it only")
	fmt.Fprintln(w, "checks what serve checks at start (the configuration, the environment, the")
	fmt.Fprintln(w, "listen address, Redis and its ACL, tracing, files), connects once to every")
	fmt.Fprintln(w, "replica, prints a table (replica, protocol, Gradio version, endpoints, time to")
	fmt.Fprintln(w, "connect, error) and exits non-zero if anything failed: a CI step before a deploy.")
	fmt.Fprintln(w, "\nSIGHUP (or POST /api/admin/reload) reloads the configuration without cutting a")
	fmt.Fprintln(w, "call: replicas added serve, replicas removed are drained, pool sizes and")
	fmt.Fprintln(w, "time-outs change in place; other changed keys are refused until a restart.")
	fmt.Fprintln(w, "\nFlags win over environment variables, which win over the file. A GRADIOPOOL_")
	fmt.Fprintln(w, "variable that is no setting is refused (a misspelling would be ignored).")
	fmt.Fprintln(w, "Secrets come only from the environment: HF_TOKEN, GRADIOPOOL_ADMIN_TOKEN,")
	fmt.Fprintln(w, "GRADIOPOOL_API_KEYS (comma-separated), GRADIOPOOL_HASH_KEY, GRADIOPOOL_REDIS_URL")
	fmt.Fprintln(w, "(several gateways as one; needs GRADIOPOOL_HASH_KEY).")
	printed := map[string]bool{}
	printFlag := func(name string) {
		f := fs.Lookup(name)
		if f == nil || printed[name] {
			return
		}
		printed[name] = true
		kind, usage := flag.UnquoteUsage(f)
		if kind != "" {
			kind = " " + kind
		}
		fmt.Fprintf(w, "  --%s%s\n        %s\n", f.Name, kind, usage)
	}
	fmt.Fprintln(w, "\nEssential flags:")
	for _, name := range essentialFlags {
		printFlag(name)
	}
	for _, sec := range flagSections {
		fmt.Fprintf(w, "\n%s:\n", sec.title)
		for _, s := range gateway.Settings() {
			section, _, nested := strings.Cut(s.Key, ".")
			if !nested {
				section = ""
			}
			if section == sec.section && s.Flag != "" {
				printFlag(strings.TrimPrefix(s.Flag, "--"))
			}
		}
	}
	var rest []string
	fs.VisitAll(func(f *flag.Flag) {
		if !printed[f.Name] {
			rest = append(rest, f.Name)
		}
	})
	if len(rest) > 0 {
		fmt.Fprintln(w, "\nOther flags:")
		for _, name := range rest {
			printFlag(name)
		}
	}
	fmt.Fprintln(w, "\nEvery setting, with its key and variable: docs/configuration.md.")
}

// loadServeConfig reads file (or $GRADIOPOOL_CONFIG), then the environment,
// then the flags, and validates the result.
func loadServeConfig(path string, lookup func(string) (string, bool), flags func(*gateway.Config) error) (gateway.Config, error) {
	var cfg gateway.Config
	if path == "" {
		path, _ = lookup(gateway.ConfigEnvFile)
	}
	if path != "" {
		if err := cfg.LoadFile(path); err != nil {
			return cfg, err
		}
	}
	if err := cfg.ApplyEnv(lookup); err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	if flags != nil {
		if err := flags(&cfg); err != nil {
			return cfg, fmt.Errorf("config: %w", err)
		}
	}
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

// serveOn opens the gateway for cfg (gateway.Open) and serves on ln until
// ctx ends, then closes what it opened. SIGHUP, and POST
// /api/admin/reload, reload the configuration through load (see
// gateway.Gateway.Reload).
func serveOn(ctx context.Context, cfg gateway.Config, ln net.Listener, logger *slog.Logger, load func() (gateway.Config, error)) error {
	g, err := gateway.Open(ctx, cfg, logger)
	if err != nil {
		ln.Close()
		return err
	}
	g.SetConfigLoader(load)
	// SIGHUP's default action kills the process at once, cutting every
	// call in flight; `systemctl reload` (ExecReload) and `kill -HUP` send
	// it. It reloads instead; Reload logs what it applied and refused.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	defer func() { signal.Stop(hup); close(done) }()
	go func() {
		for {
			select {
			case <-hup:
				logger.Info("SIGHUP: reloading the configuration")
				_, _ = g.Reload() // logged by Reload
			case <-done:
				return
			}
		}
	}()
	serveErr := g.Serve(ctx, ln)
	cctx, cancel := context.WithTimeout(context.Background(), poolCloseTimeout)
	defer cancel()
	if err := g.Close(cctx); err != nil && serveErr == nil {
		logger.Warn("closing the pool", slog.Any("error", err))
	}
	logger.Info("gateway stopped")
	return serveErr
}

// poolCloseTimeout bounds the wait for sessions still open after a drain.
const poolCloseTimeout = 10 * time.Second
