package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"

	"github.com/gradiopool/gradiopool/pool/cluster"
)

// Preflight checks, without starting anything, what starting a gateway for
// cfg (a validated configuration) checks beyond [Config.Validate]: the
// tracing environment ([SetupTracing]'s refusals: the OTLP protocol, the
// exporter's settings), the Redis of a cluster (reachable, the right
// topology, the ACL rule: [cluster.Check], which joins nothing) with its
// TLS files, and the front door's upload directory. `gradiopool serve
// --check` runs it, so that a check that passes means a start that does
// not refuse. Every problem is reported at once.
//
// A Redis that does not answer is an error unless cluster.start_degraded
// lets the gateway start without it; warn is then called with what the
// start would log.
func Preflight(ctx context.Context, cfg Config, warn func(string)) error {
	var errs []error
	if tracingEnabled(os.Getenv) {
		if err := tracingProtocol(os.Getenv); err != nil {
			errs = append(errs, err)
		} else if exp, err := otlptracehttp.New(ctx); err != nil {
			errs = append(errs, fmt.Errorf("tracing: %w", err))
		} else {
			_ = exp.Shutdown(ctx) // nothing was exported
		}
	}
	if cfg.RedisURL() != "" {
		if err := checkRedis(ctx, cfg); err != nil {
			var mis *cluster.MisconfiguredError
			if cfg.Cluster.StartDegraded && !errors.As(err, &mis) {
				warn(fmt.Sprintf("redis does not answer; cluster.start_degraded: the gateway would start on its share and join when it does (%v)", err))
			} else {
				errs = append(errs, err)
			}
		}
	}
	if dir := cfg.FrontDoor.UploadDir; dir != "" && !cfg.FrontDoor.Disabled {
		if err := writableDir(dir); err != nil {
			errs = append(errs, fmt.Errorf("frontdoor.upload_dir: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkRedis runs the cluster's start-up check against cfg's Redis.
func checkRedis(ctx context.Context, cfg Config) error {
	rc, topo, err := redisClient(cfg) // reads the TLS files
	if err != nil {
		return err
	}
	defer rc.Close()
	err = cluster.Check(ctx, cluster.Config{
		Client: rc, Name: cfg.Cluster.Name, LeaseTTL: cfg.Cluster.LeaseTTL,
		Limit: cfg.Pool.MaxConnections, MaxWaiters: cfg.Pool.MaxWaiters, PriorityMaxWait: cfg.Pool.PriorityMaxWait,
		WaitReplicas: waitReplicas(cfg.Cluster.WaitReplicas, topo),
	})
	if err != nil {
		return fmt.Errorf("redis at %s (%s): %w", cluster.Describe(rc), topo, err)
	}
	return nil
}

// writableDir reports whether the gateway can keep files in dir: an
// existing directory it can write to, or one it can create (its parent
// exists). Nothing is left behind.
func writableDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		parent := filepath.Dir(filepath.Clean(dir))
		if pfi, perr := os.Stat(parent); perr != nil || !pfi.IsDir() {
			return fmt.Errorf("%s does not exist, nor does its parent %s", dir, parent)
		}
		return nil
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".gradiopool-check-*")
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
