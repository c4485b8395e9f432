package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/gateway/frontdoor"
	"github.com/gradiopool/gradiopool/internal/ttlstore"
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

	// controls are the operators' replica controls shared through Redis;
	// the syncControls loop runs until ctlStop is closed.
	controls *cluster.Controls
	ctlStop  chan struct{}
	ctlDone  chan struct{}

	// The front door's calls that end on another gateway's stream.
	endSub  *redis.PubSub
	endDone chan struct{} // closed when the subscriber stopped
}

// endChannel carries "front event-id code" of front-door calls that ended
// on one gateway's stream while another gateway holds their slots (code:
// frontdoor.CallEnd.Code, endCompleted for ""); the holder reports them.
// A cancel of a call waiting in the holder's queue comes the same way.
const endCompleted = "completed"

func (m *clusterMember) endChannel() string { return "{" + m.name + "}:fd-end" }

// queueChannel carries "front note-JSON": the state of a front-door call
// waiting in one gateway's queue, for the gateway serving its stream.
func (m *clusterMember) queueChannel() string { return "{" + m.name + "}:fd-queue" }

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
	m.store = m.coord.Store(shared)
	m.controls = cluster.NewControls(rc, cfg.Cluster.Name)
	pc.Store = m.store
	pc.Limiter = m.coord
	metrics.Registry().MustRegister(m.coord.Collector())
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

// attach gives the member its pool and the gateway its cluster scope, and
// relays front-door call ends from the other gateways to this one's.
func (m *clusterMember) attach(p *pool.Pool, g *Gateway) {
	m.pool.Store(p)
	m.coord.AddReplicas(p.Replicas()...)
	g.setClusterStats(func(ctx context.Context) any { return m.coord.Stats(ctx) })
	m.ctlStop, m.ctlDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.ctlDone)
		m.syncControls(p, m.ctlStop, controlPollInterval)
	}()
	if g.front == nil {
		return
	}
	m.endSub = m.rc.Subscribe(context.Background(), m.endChannel(), m.queueChannel())
	m.endDone = make(chan struct{})
	ch := m.endSub.Channel()
	front := g.front
	go func() {
		defer close(m.endDone)
		for msg := range ch {
			f, rest, _ := strings.Cut(msg.Payload, " ")
			if msg.Channel == m.queueChannel() {
				var n frontdoor.QueueNote
				if json.Unmarshal([]byte(rest), &n) == nil {
					front.QueueNoted(f, n)
				}
				continue
			}
			// "front event-id code"; an older gateway sends no code:
			// reported as completed.
			ev, code, _ := strings.Cut(rest, " ")
			if code == endCompleted {
				code = ""
			}
			front.Ended(f, ev, code)
		}
	}()
}

// foreignEnd publishes a front-door call that ended here while another
// gateway may hold its slot (frontdoor.Config.OnForeignEnd).
func (m *clusterMember) foreignEnd(front, eventID, code string) {
	if !m.coord.RedisUp() {
		return // sessions are local while Redis is lost
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if code == "" {
		code = endCompleted
	}
	if err := m.rc.Publish(ctx, m.endChannel(), front+" "+eventID+" "+code).Err(); err != nil {
		m.coord.RedisFailed(err)
	}
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
	if m.endSub != nil {
		_ = m.endSub.Close()
		<-m.endDone
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

// frontStore keeps the front door's caller sessions in Redis, with a local
// copy that answers while Redis is lost (as the assignments do).
var _ frontdoor.BindingClaimer = (*frontStore)(nil)

type frontStore struct {
	coord  *cluster.Coordinator
	shared *frontdoor.RedisStore
	local  *frontdoor.MemoryStore
}

func (m *clusterMember) frontStore(name string) frontdoor.Store {
	shared, _ := frontdoor.NewRedisStore(m.rc, "{"+name+"}:fd:") // m.rc is not nil
	return &frontStore{coord: m.coord, shared: shared, local: frontdoor.NewMemoryStore(nil)}
}

// sharedOK reports whether a shared-store call succeeded; a Redis failure
// (not the caller's context) switches the cluster member to local mode.
func (s *frontStore) sharedOK(ctx context.Context, err error) bool {
	if err != nil && ctx.Err() == nil {
		s.coord.RedisFailed(err)
	}
	return err == nil
}

func (s *frontStore) Get(ctx context.Context, front string) (frontdoor.Binding, bool, error) {
	if s.coord.RedisUp() {
		b, ok, err := s.shared.Get(ctx, front)
		if s.sharedOK(ctx, err) {
			return b, ok, nil
		}
	}
	return s.local.Get(ctx, front)
}

func (s *frontStore) Set(ctx context.Context, front string, b frontdoor.Binding, ttl time.Duration) error {
	_ = s.local.Set(ctx, front, b, ttl)
	if s.coord.RedisUp() {
		s.sharedOK(ctx, s.shared.Set(ctx, front, b, ttl))
	}
	return nil
}

// ClaimBinding settles a session's first binding in Redis (SET NX), so
// that two gateways binding one session at once agree; while Redis is
// lost the local copy decides.
func (s *frontStore) ClaimBinding(ctx context.Context, front string, b frontdoor.Binding, ttl time.Duration) (frontdoor.Binding, error) {
	if s.coord.RedisUp() {
		won, err := s.shared.ClaimBinding(ctx, front, b, ttl)
		if s.sharedOK(ctx, err) {
			_ = s.local.Set(ctx, front, won, ttl)
			return won, nil
		}
	}
	return s.local.ClaimBinding(ctx, front, b, ttl)
}

func (s *frontStore) Delete(ctx context.Context, front string) error {
	_ = s.local.Delete(ctx, front)
	if s.coord.RedisUp() {
		s.sharedOK(ctx, s.shared.Delete(ctx, front))
	}
	return nil
}

// frontDoorCluster returns the front door's session store and call-end
// hook: shared through Redis when Open made this gateway a cluster member,
// else nil (sessions in memory, calls joined here).
func (g *Gateway) frontDoorCluster() (frontdoor.Store, func(front, eventID, code string), frontdoor.ReaderMarks, frontdoor.QueueNotes) {
	if m := g.member; m != nil {
		return m.frontStore(m.name), m.foreignEnd, m.readerMarks(m.name), &queueNotes{m: m}
	}
	return nil, nil, nil, nil
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

// queueNotes shares the front door's queued calls between the gateways
// (frontdoor.Config.QueueNotes): each session's calls are one Redis hash
// (event id -> the latest note, as JSON) with the session's expiry, and
// each note is also published, with its session, on queueChannel. While
// Redis is lost nothing is shared: the sessions are local then.
type queueNotes struct{ m *clusterMember }

func (q *queueNotes) key(front string) string { return "{" + q.m.name + "}:fdq:" + front }

func (q *queueNotes) failed(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil {
		q.m.coord.RedisFailed(err)
	}
	return err
}

func (q *queueNotes) Put(ctx context.Context, front string, n frontdoor.QueueNote, ttl time.Duration) error {
	if !q.m.coord.RedisUp() {
		return nil
	}
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	// One round trip. On a Redis Cluster the PUBLISH may go to another
	// node than the hash's, in parallel: a reader may get the note before
	// the hash has it, which is harmless (it applies the message itself),
	// and Put returns only once both are done (a join is answered after).
	_, err = q.m.rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, q.key(front), n.ID, b)
		p.PExpire(ctx, q.key(front), ttl)
		p.Publish(ctx, q.m.queueChannel(), front+" "+string(b))
		return nil
	})
	return q.failed(ctx, err)
}

func (q *queueNotes) Notes(ctx context.Context, front string) ([]frontdoor.QueueNote, error) {
	if !q.m.coord.RedisUp() {
		return nil, nil
	}
	m, err := q.m.rc.HGetAll(ctx, q.key(front)).Result()
	if err != nil {
		return nil, q.failed(ctx, err)
	}
	out := make([]frontdoor.QueueNote, 0, len(m))
	for _, v := range m {
		var n frontdoor.QueueNote
		if json.Unmarshal([]byte(v), &n) == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

func (q *queueNotes) Done(ctx context.Context, front, id string) error {
	if !q.m.coord.RedisUp() {
		return nil
	}
	return q.failed(ctx, q.m.rc.HDel(ctx, q.key(front), id).Err())
}

// readerMarks is the front door's marks of sessions with a data stream
// open (frontdoor.Config.Readers), one key each in Redis with its own
// expiry, so that frontdoor.read_grace holds in a cluster. While Redis is
// lost the sessions are local, and so are their streams: nothing is
// marked, and the local count decides.
type readerMarks struct {
	coord *cluster.Coordinator
	kv    *ttlstore.Redis
}

func (m *clusterMember) readerMarks(name string) frontdoor.ReaderMarks {
	kv, err := ttlstore.NewRedis(ttlstore.RedisConfig{Client: m.rc, KeyPrefix: "{" + name + "}:fdr:"})
	if err != nil {
		return nil // only for a nil client, which a member never has
	}
	return &readerMarks{coord: m.coord, kv: kv}
}

func (r *readerMarks) Mark(ctx context.Context, front string, ttl time.Duration) error {
	if !r.coord.RedisUp() {
		return nil
	}
	err := r.kv.Set(ctx, front, "1", ttl)
	if err != nil && ctx.Err() == nil {
		r.coord.RedisFailed(err)
	}
	return err
}

func (r *readerMarks) Marked(ctx context.Context, front string) (bool, error) {
	if !r.coord.RedisUp() {
		return false, nil
	}
	_, ok, err := r.kv.Get(ctx, front)
	if err != nil && ctx.Err() == nil {
		r.coord.RedisFailed(err)
	}
	return ok, err
}
