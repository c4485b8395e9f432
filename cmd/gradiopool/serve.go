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
	check := fs.Bool("check", false, "validate the configuration, connect once to every replica, print a table and exit (non-zero on any error)")
	apply := gateway.Flags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gradiopool serve [--config FILE] [--check] [flags]")
		fmt.Fprintln(stderr, "\nRuns the HTTP gateway in front of the replicas until SIGTERM or SIGINT, then")
		fmt.Fprintln(stderr, "drains (calls in flight finish, up to drain_timeout). With --check it only")
		fmt.Fprintln(stderr, "validates the configuration, connects once to every replica, prints a table")
		fmt.Fprintln(stderr, "(replica, protocol, Gradio version, endpoints, time to connect, error) and exits")
		fmt.Fprintln(stderr, "non-zero if anything failed: a CI step before a deploy.")
		fmt.Fprintln(stderr, "\nSIGHUP (or POST /api/admin/reload) reloads the configuration without cutting a")
		fmt.Fprintln(stderr, "call: replicas added serve, replicas removed are drained, pool sizes and")
		fmt.Fprintln(stderr, "time-outs change in place; other changed keys are refused until a restart.")
		fmt.Fprintln(stderr, "\nFlags win over environment variables, which win over the file.")
		fmt.Fprintln(stderr, "Secrets come only from the environment: HF_TOKEN, GRADIOPOOL_ADMIN_TOKEN,")
		fmt.Fprintln(stderr, "GRADIOPOOL_API_KEYS (comma-separated), GRADIOPOOL_HASH_KEY, GRADIOPOOL_REDIS_URL")
		fmt.Fprintln(stderr, "(user assignments shared by several instances; needs GRADIOPOOL_HASH_KEY).")
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
		return fmt.Errorf("%w: serve takes no arguments, got %q", errUsage, fs.Args())
	}
	load := func() (gateway.Config, error) { return loadServeConfig(*configPath, os.LookupEnv, apply) }
	cfg, err := load()
	if err != nil {
		return err
	}
	if *check {
		return runCheck(ctx, cfg, stdout)
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
