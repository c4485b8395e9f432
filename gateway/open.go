package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// Open builds a gateway and everything under it from cfg: the Prometheus
// metrics, the cluster membership when a Redis URL is set (package
// pool/cluster: the Redis client, each replica's limit shared by every
// gateway, the shared assignment store, cluster stats), the pool of the replicas, and the Gateway
// over it. It is the one composition root: `gradiopool serve`, the demo and
// the benchmarks all call it. cfg is normalized and validated here. logger
// nil means no logging; opts are extra client options for every replica.
//
// Serve the result with [Gateway.Serve], then call [Gateway.Close] to close
// the pool and leave the cluster.
func Open(ctx context.Context, cfg Config, logger *slog.Logger, opts ...gradio.Option) (*Gateway, error) {
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	metrics := NewMetrics(nil)
	pc := cfg.PoolConfig(logger, metrics, opts...)
	var closers []func() error
	var member *clusterMember
	if cfg.RedisURL() != "" {
		var err error
		if member, err = joinCluster(ctx, cfg, logger, metrics, &pc); err != nil {
			return nil, err
		}
		closers = append(closers, member.close)
	}
	p, err := pool.New(pc)
	if err != nil {
		for _, c := range closers {
			_ = c()
		}
		return nil, fmt.Errorf("gateway: %w", err)
	}
	// Connect every replica now (not a call, no sessions): /readyz says
	// ready once one has connected, and a replica that cannot is logged at
	// start with its cause. The pool's prober retries those that failed.
	p.CheckReplicas()
	backend := newPoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(backend)
	as := startAutoscale(cfg, p, logger, metrics, member)
	g := newGateway(cfg, backend, logger, metrics, built{pool: p, backend: backend, closers: closers, member: member, autoscale: as})
	if member != nil {
		member.attach(p, g)
	}
	return g, nil
}

// Pool returns the pool a gateway made by [Open] serves (nil for [New]).
func (g *Gateway) Pool() *pool.Pool { return g.pool }

// Close closes what [Open] built: the pool (waiting for its sessions up to
// ctx) and the Redis client. Call it after Serve returned. For a Gateway
// made by [New], whose backend belongs to the caller, it closes only the
// Gradio front door (its sessions and kept uploads).
func (g *Gateway) Close(ctx context.Context) error {
	var errs []error
	if g.autoscale != nil {
		errs = append(errs, g.autoscale.close()) // before the pool it steers
	}
	if g.front != nil {
		errs = append(errs, g.front.Close()) // its sessions hold slots of the pool
	}
	if g.pool != nil {
		errs = append(errs, g.pool.Close(ctx))
	}
	for _, c := range g.closers {
		errs = append(errs, c())
	}
	g.closers = nil
	return errors.Join(errs...)
}

// redisClient builds the Redis client of cfg's URL and TLS settings
// (standalone, Sentinel or Cluster: see [cluster.NewClient]). It does no
// I/O: cluster.New checks that Redis answers and accepts what the cluster
// needs. Messages never contain the URL (it may carry a password).
func redisClient(cfg Config) (redis.UniversalClient, cluster.Topology, error) {
	c, topo, err := cluster.NewClient(cfg.RedisURL(), cfg.Cluster.tlsFiles())
	if errors.Is(err, cluster.ErrBadURL) {
		return nil, "", errors.New("config: GRADIOPOOL_REDIS_URL is not a valid redis:// or rediss:// URL")
	}
	if err != nil {
		return nil, "", fmt.Errorf("config: GRADIOPOOL_REDIS_URL / cluster.redis_url: %w", err)
	}
	return c, topo, nil
}
