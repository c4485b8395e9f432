package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/pool"
	"github.com/gradiopool/gradiopool/pool/assign"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// clusterLeaveTimeout bounds the clean-up in Redis when a gateway leaves.
const clusterLeaveTimeout = 5 * time.Second

// clusterMember is a gateway's part of a cluster, built by [Open]: the
// Redis client, the coordinator (limits shared by every gateway, published
// stats) and the assignment store.
type clusterMember struct {
	rc    *redis.Client
	coord *cluster.Coordinator
	store *cluster.Store
	pool  atomic.Pointer[pool.Pool] // set once the pool exists, for the published stats
}

// joinCluster connects to the cluster's Redis and sets pc up to use it:
// Limiter (each replica's max_connections across every gateway) and Store
// (assignments in Redis with SET NX first claims, kept locally too for
// while Redis is lost).
func joinCluster(ctx context.Context, cfg Config, logger *slog.Logger, metrics *Metrics, pc *pool.Config) (*clusterMember, error) {
	rc, err := redisClient(ctx, cfg.RedisURL())
	if err != nil {
		return nil, err
	}
	redis.SetLogger(redisLogger{logger}) // go-redis' own retries and reconnects: debug only
	m := &clusterMember{rc: rc}
	m.coord, err = cluster.New(ctx, cluster.Config{
		Client: rc, Name: cfg.Cluster.Name, LeaseTTL: cfg.Cluster.LeaseTTL,
		Limit: cfg.Pool.MaxConnections, MaxWaiters: cfg.Pool.MaxWaiters,
		Logger: logger, LocalStats: m.localStats,
	})
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	shared, err := assign.NewRedis(assign.RedisConfig{Client: rc, Prefix: "{" + cfg.Cluster.Name + "}:assign:"})
	if err != nil {
		_ = m.close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	m.store = m.coord.Store(shared)
	pc.Store = m.store
	pc.Limiter = m.coord
	metrics.Registry().MustRegister(m.coord.Collector())
	logger.Info("cluster: limits and user assignments are shared through Redis",
		slog.String("addr", rc.Options().Addr), slog.String("gateway", m.coord.ID()))
	return m, nil
}

// attach gives the member its pool and the gateway its cluster scope.
func (m *clusterMember) attach(p *pool.Pool, g *Gateway) {
	m.pool.Store(p)
	m.coord.AddReplicas(p.Replicas()...)
	g.SetClusterStats(func(ctx context.Context) any { return m.coord.Stats(ctx) })
}

func (m *clusterMember) localStats() map[string]cluster.LocalReplica {
	p := m.pool.Load()
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	out := map[string]cluster.LocalReplica{}
	for name, r := range p.Stats(ctx).Pools {
		out[name] = cluster.LocalReplica{Sessions: r.TotalConnections, InUse: r.InUseConnections, Waiting: r.QueueLength}
	}
	return out
}

// close leaves the cluster; after the pool is closed.
func (m *clusterMember) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterLeaveTimeout)
	defer cancel()
	err := m.coord.Close(ctx)
	if m.store != nil {
		_ = m.store.Close()
	}
	m.rc.Close()
	return err
}

// redisLogger sends go-redis' internal messages (reconnects, retries) to
// the debug level: the coordinator logs an outage once, at warn.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.Debug("redis: " + fmt.Sprintf(format, v...))
}
