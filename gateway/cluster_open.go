package gateway

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/gateway/frontdoor"
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
	rc    redis.UniversalClient
	coord *cluster.Coordinator
	store *cluster.Store
	pool  atomic.Pointer[pool.Pool] // set once the pool exists, for the published stats
	name  string
	// owners forwards the requests of sessions other gateways own.
	owners *owners

	// controls are the operators' replica controls shared through Redis;
	// the syncControls loop runs until ctlStop is closed.
	controls *cluster.Controls
	ctlStop  chan struct{}
	ctlDone  chan struct{}
}

// joinCluster connects to the cluster's Redis and sets pc up to use it:
// Limiter (each replica's max_connections across every gateway) and Store
// (assignments in Redis with SET NX first claims, kept locally too for
// while Redis is lost).
func joinCluster(ctx context.Context, cfg Config, logger *slog.Logger, metrics *Metrics, pc *pool.Config) (*clusterMember, error) {
	rc, topo, err := redisClient(cfg)
	if err != nil {
		return nil, err
	}
	quietRedisLogs(logger)
	loss, _ := cluster.ParseLossPolicy(cfg.Cluster.OnRedisLoss) // validated
	m := &clusterMember{rc: rc, name: cfg.Cluster.Name}
	m.coord, err = cluster.New(ctx, cluster.Config{
		Client: rc, Name: cfg.Cluster.Name, LeaseTTL: cfg.Cluster.LeaseTTL,
		Limit: cfg.Pool.MaxConnections, MaxWaiters: cfg.Pool.MaxWaiters, PriorityMaxWait: cfg.Pool.PriorityMaxWait,
		Logger: logger, LocalStats: m.localStats,
		OnRedisLoss: loss, Gateways: cfg.Cluster.Gateways, StartDegraded: cfg.Cluster.StartDegraded,
		WaitReplicas: waitReplicas(cfg.Cluster.WaitReplicas, topo),
	})
	if err != nil {
		where := cluster.Describe(rc)
		rc.Close()
		var mis *cluster.MisconfiguredError
		if errors.As(err, &mis) {
			return nil, fmt.Errorf("gateway: redis at %s (%s): %w", where, topo, err)
		}
		return nil, fmt.Errorf("gateway: redis at %s does not answer (%s; cluster.start_degraded starts without it): %w", where, topo, err)
	}
	shared, err := assign.NewRedis(assign.RedisConfig{Client: rc, Prefix: "{" + cfg.Cluster.Name + "}:assign:"})
	if err != nil {
		_ = m.close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	m.owners = newOwners(rc, cfg.Cluster.Name, m.coord.ID(), cfg.advertiseURL(), cfg.Secrets.HashKey,
		cmp.Or(cfg.FrontDoor.SessionTTL, frontdoor.DefaultSessionTTL), logger)
	m.store = m.coord.Store(shared)
	m.controls = cluster.NewControls(rc, cfg.Cluster.Name)
	pc.Store = m.store
	pc.Limiter = m.coord
	metrics.Registry().MustRegister(m.coord.Collector(), prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: metricsNamespace + "_cluster_owners_lost_total",
		Help: "Gateways owning sessions that this gateway took for lost (not dialled, or not answering its probes) while forwarding to them.",
	}, func() float64 { return float64(m.owners.lost.Load()) }))
	logger.Info("cluster: limits and user assignments are shared through Redis",
		slog.String("topology", string(topo)), slog.String("addr", cluster.Describe(rc)), slog.String("gateway", m.coord.ID()))
	return m, nil
}

// waitReplicas resolves cluster.redis_wait_replicas: 0 means 1 where the
// topology has replicas to fail over to (Sentinel, Cluster), else none;
// -1 none.
func waitReplicas(n int, topo cluster.Topology) int {
	switch {
	case n > 0:
		return n
	case n < 0 || topo == cluster.Standalone:
		return 0
	}
	return 1
}

// attach gives the member its pool and the gateway its cluster scope.
func (m *clusterMember) attach(p *pool.Pool, g *Gateway) {
	m.pool.Store(p)
	m.coord.AddReplicas(p.Replicas()...)
	g.setClusterStats(func(ctx context.Context) any { return m.coord.Stats(ctx) })
	m.ctlStop, m.ctlDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.ctlDone)
		m.syncControls(p, m.ctlStop, controlPollInterval)
	}()
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
	if m.owners != nil {
		m.owners.close()
	}
	if m.ctlStop != nil {
		close(m.ctlStop)
		<-m.ctlDone
	}
	err := m.coord.Close(ctx)
	if m.store != nil {
		_ = m.store.Close()
	}
	m.rc.Close()
	return err
}

// go-redis' logger is global: it is set once, to forward to the logger of
// the latest Open.
var (
	redisLogOnce sync.Once
	redisLog     atomic.Pointer[slog.Logger]
)

// quietRedisLogs sends go-redis' internal messages (reconnects, retries)
// to logger's debug level: the coordinator logs an outage once, at warn.
func quietRedisLogs(logger *slog.Logger) {
	redisLog.Store(logger)
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{}) })
}

type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		l.Debug("redis: " + fmt.Sprintf(format, v...))
	}
}

// clusterAppID is the front door's app_id shared by a cluster's gateways
// (frontdoor.Config.AppID), keyed by the hash key a cluster requires and
// its name; 0 (random per process) for a gateway alone.
func (g *Gateway) clusterAppID() uint64 {
	if g.member == nil {
		return 0
	}
	m := hmac.New(sha256.New, []byte(g.cfg.Secrets.HashKey))
	m.Write([]byte("gradiopool front door app_id\x00" + g.member.name))
	return binary.BigEndian.Uint64(m.Sum(nil)) | 1<<63
}
