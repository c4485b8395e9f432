package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/pool"

	"github.com/gradiopool/gradiopool/internal/logattr"
)

// ErrClosed is returned by Acquire on a closed Coordinator.
var ErrClosed = errors.New("cluster: closed")

// Redis states of a Coordinator.
const (
	modeUp        int32 = iota // Redis answers: limits are global
	modeDown                   // Redis lost: local shares
	modeRejoining              // Redis back: registering this gateway's calls
)

// Coordinator is one gateway's member of a cluster: it shares each
// replica's limit with the other gateways through Redis (a [pool.Limiter]),
// keeps this gateway's leases and heartbeat alive, publishes its stats, and
// falls back to a local share while Redis cannot be reached.
type Coordinator struct {
	cfg    settings
	rdb    redis.UniversalClient
	id     string
	prefix string // "{name}:"
	host   string
	log    *slog.Logger

	epoch time.Time // the waiters' clock starts here

	mode atomic.Int32
	seq  atomic.Uint64 // lease numbers
	// refreshed is the clock (see clock) at the start of the last upkeep
	// round that refreshed every lease in Redis: each lease this gateway
	// holds is counted there until at least refreshed + LeaseTTL.
	refreshed atomic.Int64
	// lostAt is the clock when this gateway last noticed Redis lost:
	// every gateway's last refresh started before it.
	lostAt atomic.Int64

	// mu guards lims, alive, reserved and pongs; never held during I/O.
	mu    sync.Mutex
	lims  map[string]*limiter
	alive []string // gateways alive at the last heartbeat (or join notice), this one included
	// aliveN is the number of gateways alive as of the last acquire
	// script (which counts them), so that the local share's divisor is as
	// fresh as the calls, not only as the last heartbeat.
	aliveN int
	// pongs are the start-up check's pub/sub round trips in flight.
	pongs map[string]chan struct{}
	// unchecked: started while Redis did not answer; the start-up check
	// runs when it first answers.
	unchecked atomic.Bool
	misLogged atomic.Bool // the refusal after a degraded start was logged
	// unreplicatedLogged: a rejoin found no replica acknowledging (logged once per episode).
	unreplicatedLogged atomic.Bool
	// reserved are the gateways this one reserved a share for when it
	// rejoined, until the reservations lapse: they still count as alive
	// (they serve on their shares) though they have no heartbeat yet.
	reserved map[string]time.Time

	// relMu guards relPending: lease ids released locally, removed from
	// Redis in batches by the releaser.
	relMu      sync.Mutex
	relPending map[*limiter][]string
	relKick    chan struct{} // flush now
	relSoon    chan struct{} // a lease became idle: return it after PollInterval

	ps *redis.PubSub

	// upMu guards upCtx: the context of the upkeep (heartbeat, lease
	// refresh) while Redis answers, cancelled by the first failure, so that
	// an upkeep round still retrying when Redis comes back cannot mark this
	// gateway alive (joined) before it has rejoined.
	upMu     sync.Mutex
	upCtx    context.Context
	upCancel context.CancelFunc

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	bgMu   sync.Mutex // orders wg.Add before Close's wg.Wait
	closed bool       // guarded by bgMu

	closeOnce sync.Once

	snapMu sync.Mutex // guards snap
	snap   *Stats     // the last cluster stats read, for the metrics

	ops       [numOps]atomic.Uint64
	fallbacks atomic.Uint64 // times Redis was lost
	relost    atomic.Uint64 // leases that had expired before their refresh
	handoffs  atomic.Uint64 // leases handed to a local waiter without Redis
}

var _ pool.Limiter = (*Coordinator)(nil)

// New starts a Coordinator: it registers the gateway (one heartbeat),
// subscribes to release notices and starts refreshing in the background.
// If Redis does not answer, it starts on local shares and keeps trying;
// only a bad Config is an error. Close it after the pool that uses it.
func New(ctx context.Context, cfg Config) (*Coordinator, error) {
	s, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := newCoordinator(s)
	// The start-up check: the subscription, a heartbeat, every script and
	// a pub/sub round trip. A Redis that answers but refuses one of them
	// is a misconfiguration that would silently ignore the limit: refuse
	// to start. One that does not answer is an outage.
	sctx, cancel := context.WithTimeout(ctx, max(s.opTimeout, startTimeout))
	err = c.subscribed(sctx)
	c.goBackground(c.reader) // the probe's round trip comes back through it
	if err == nil {
		err = c.misconfigured("the heartbeat script", c.heartbeat(sctx))
	}
	if err == nil {
		err = c.probe(sctx)
	}
	cancel()
	var mis *MisconfiguredError
	switch {
	case errors.As(err, &mis):
		c.stop()
		return nil, err
	case err != nil && !s.StartDegraded:
		c.stop()
		return nil, fmt.Errorf("cluster: redis unreachable: %w", err)
	case err != nil:
		c.unchecked.Store(true)
		c.mode.Store(modeDown)
		c.fallbacks.Add(1)
		c.log.Warn("cluster: redis unreachable at start: starting degraded", slog.String("gateway", c.id),
			slog.String("on_redis_loss", s.OnRedisLoss.String()), slog.Int("share", c.share(s.Limit)), slog.Any("error", err))
	default:
		c.announce()
	}
	c.goBackground(c.loop)
	c.goBackground(c.releaser)
	c.log.Info("cluster: joined", slog.String("gateway", c.id), slog.String("cluster", s.Name),
		slog.Int("limit", s.Limit), logattr.Ms("lease_ttl", s.LeaseTTL))
	return c, nil
}

// newCoordinator builds the coordinator of s, subscribed to the cluster's
// channel; nothing has been checked or announced yet.
func newCoordinator(s settings) *Coordinator {
	c := &Coordinator{
		cfg: s, rdb: s.Client, id: s.GatewayID, prefix: "{" + s.Name + "}:",
		lims: map[string]*limiter{}, reserved: map[string]time.Time{}, relPending: map[*limiter][]string{}, relKick: make(chan struct{}, 1),
		relSoon: make(chan struct{}, 1), pongs: map[string]chan struct{}{}, epoch: time.Now(),
	}
	if c.id == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		c.id = "gw-" + hex.EncodeToString(b[:])
	}
	c.host, _ = os.Hostname()
	c.log = s.Logger
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.alive = []string{c.id}
	for _, r := range s.Replicas {
		c.limiter(r)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.upCtx, c.upCancel = context.WithCancel(c.ctx)
	c.ps = c.rdb.Subscribe(c.ctx, c.channel())
	return c
}

// Check runs New's start-up check against cfg's Redis without joining the
// cluster: the subscription, every script once on scratch keys (which it
// deletes) and a pub/sub round trip, but no heartbeat and no notice to the
// other gateways, so that their shares do not count it. It answers what
// New would refuse to start on: a *MisconfiguredError (wrong topology, a
// missing ACL permission) or an unreachable Redis. `gradiopool serve
// --check` runs it.
func Check(ctx context.Context, cfg Config) error {
	s, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	c := newCoordinator(s)
	sctx, cancel := context.WithTimeout(ctx, max(s.opTimeout, startTimeout))
	defer cancel()
	err = c.subscribed(sctx)
	c.goBackground(c.reader) // the probe's round trip comes back through it
	if err == nil {
		err = c.probe(sctx)
	}
	c.stop()
	var mis *MisconfiguredError
	if err != nil && !errors.As(err, &mis) {
		return fmt.Errorf("cluster: redis unreachable: %w", err)
	}
	return err
}

// startTimeout bounds the start-up check.
const startTimeout = 5 * time.Second

// subscribed waits for the confirmation of the subscription to the
// cluster's channel (a refused channel shows here).
func (c *Coordinator) subscribed(ctx context.Context) error {
	msg, err := c.ps.Receive(ctx)
	if err != nil {
		return c.misconfigured("SUBSCRIBE to "+c.channel(), err)
	}
	if _, ok := msg.(*redis.Subscription); !ok {
		return fmt.Errorf("cluster: unexpected answer %T to SUBSCRIBE", msg)
	}
	return nil
}

// reader handles the cluster's notices: "q|replica" another gateway
// started waiting, "j|gateway" a gateway joined, "p|nonce" a start-up
// check's round trip, "c|" a check script's, else a release on replica.
func (c *Coordinator) reader() {
	for m := range c.ps.Channel() {
		kind, arg, ok := strings.Cut(m.Payload, "|")
		if !ok {
			c.poke(m.Payload)
			continue
		}
		switch kind {
		case "q":
			c.contended(arg)
		case "j":
			c.joined(arg)
		case "p":
			c.pong(arg)
		case "c":
		default:
			c.poke(m.Payload)
		}
	}
}

// announce tells the other gateways that this one joined, so that their
// local shares count it at once, not only from their next heartbeat.
func (c *Coordinator) announce() {
	ctx, cancel := c.opCtx()
	defer cancel()
	if err := c.rdb.Publish(ctx, c.channel(), "j|"+c.id).Err(); err != nil {
		c.failed(err)
	}
}

// joined counts gateway gw as alive.
func (c *Coordinator) joined(gw string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.alive, gw) {
		c.alive = append(c.alive, gw)
	}
}

// stop ends the background work of a Coordinator that New refuses.
func (c *Coordinator) stop() {
	c.bgMu.Lock()
	c.closed = true
	c.bgMu.Unlock()
	c.cancel()
	_ = c.ps.Close()
	c.wg.Wait()
}

// clock is the waiters' clock (monotonic nanoseconds since New), the
// clock of the priority queues' starvation bound.
func (c *Coordinator) clock() int64 { return int64(time.Since(c.epoch)) }

// ID is this gateway's id in the cluster.
func (c *Coordinator) ID() string { return c.id }

// RedisUp reports whether Redis answers (limits are global).
func (c *Coordinator) RedisUp() bool { return c.mode.Load() == modeUp }

// AddReplicas makes the limits of replicas known before their first call
// (see Config.Replicas).
func (c *Coordinator) AddReplicas(names ...string) {
	for _, n := range names {
		c.limiter(n)
	}
}

func (c *Coordinator) channel() string { return c.prefix + "free" }

// goBackground runs f on a goroutine Close waits for; false after Close.
func (c *Coordinator) goBackground(f func()) bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

func (c *Coordinator) isClosed() bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	return c.closed
}

// limiter returns replica's limiter, creating it on first use.
func (c *Coordinator) limiter(replica string) *limiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.lims[replica]
	if l == nil {
		l = newLimiter(c, replica)
		c.lims[replica] = l
	}
	return l
}

func (c *Coordinator) limiters() []*limiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*limiter, 0, len(c.lims))
	for _, l := range c.lims {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *limiter) int {
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	return out
}

// poke wakes replica's limiter (a release notice from any gateway).
func (c *Coordinator) poke(replica string) {
	c.mu.Lock()
	l := c.lims[replica]
	c.mu.Unlock()
	if l != nil {
		l.poke()
	}
}

// contended marks replica's limiter as wanted by another gateway.
func (c *Coordinator) contended(replica string) {
	c.mu.Lock()
	l := c.lims[replica]
	c.mu.Unlock()
	if l != nil {
		l.rivals.CompareAndSwap(0, 1)
		select { // idle leases beyond the fair part go back now
		case c.relKick <- struct{}{}:
		default:
		}
	}
}

// HandOffs is how many leases went straight from a finished call to
// another call of this gateway (waiting, or arriving while the lease was
// idle), without a Redis round trip.
func (c *Coordinator) HandOffs() uint64 { return c.handoffs.Load() }

func (c *Coordinator) pokeAll() {
	for _, l := range c.limiters() {
		l.poke()
	}
}

// Acquire implements [pool.Limiter]: a lease on replica's global limit,
// first come first served among this gateway's callers of one class,
// higher classes (prio) first.
func (c *Coordinator) Acquire(ctx context.Context, replica string, prio pool.Priority) (pool.Permit, error) {
	return c.limiter(replica).acquire(ctx, prio)
}

// Waiting implements [pool.Limiter].
func (c *Coordinator) Waiting(replica string) int {
	c.mu.Lock()
	l := c.lims[replica]
	c.mu.Unlock()
	if l == nil {
		return 0
	}
	return l.waiting()
}

// share is this gateway's part of limit while Redis is lost: limit
// divided by the gateways it last saw alive (at the last heartbeat, join
// notice or acquire, and those it reserved a share for when it rejoined),
// and by at least Config.Gateways; at least 1.
// localCap is how many permits of a replica's limit this gateway may hold
// while Redis is lost, holding registered (those it held, all granted in
// Redis, when it was lost). Until its leases may lapse in Redis (LeaseTTL
// after their last refresh) it keeps to those: the other gateways may
// still reach Redis (a failover reaches the gateways at different moments,
// a network cut may isolate one), and they count this gateway's leases
// there and nothing else, so a grant beyond them could exceed the limit.
// Reusing a registered lease is safe: Redis counts it until it lapses.
// Then, until every gateway's leases may have lapsed (LeaseTTL after this
// gateway noticed the loss: each one's last refresh started before), at
// most its local share, and no more than registered: a gateway that lost
// Redis too may still keep to more than its share (its refresh came
// later). After that, the local share; a partial loss longer than
// LeaseTTL is what fail_open trades for availability.
func (c *Coordinator) localCap(limit, registered int) int {
	now, ttl := c.clock(), int64(c.cfg.LeaseTTL)
	switch {
	case now < c.refreshed.Load()+ttl:
		return registered
	case now < c.lostAt.Load()+ttl:
		return min(registered, c.share(limit))
	}
	return c.share(limit)
}

func (c *Coordinator) share(limit int) int {
	n := len(c.lastAlive())
	c.mu.Lock()
	n = max(n, c.aliveN, c.cfg.Gateways, 1)
	c.mu.Unlock()
	return max(1, limit/n)
}

// seen records the gateways alive counted by an acquire script.
func (c *Coordinator) seen(n int) {
	c.mu.Lock()
	c.aliveN = n
	c.mu.Unlock()
}

// lastAlive returns the gateways seen alive at the last heartbeat, and
// those this gateway reserved a share for that have not rejoined yet.
func (c *Coordinator) lastAlive() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.alive)
	now := time.Now()
	for g, until := range c.reserved {
		switch {
		case now.After(until):
			delete(c.reserved, g)
		case !slices.Contains(out, g):
			out = append(out, g)
		}
	}
	return out
}

// opCtx bounds one Redis operation.
func (c *Coordinator) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, c.cfg.opTimeout)
}

// RedisFailed tells the Coordinator that an operation on its Redis made by
// someone else (e.g. a store sharing the client) failed: like its own
// failures, it switches every limit to the local share until Redis
// answers again. Errors of a caller's ended context should not be
// reported.
func (c *Coordinator) RedisFailed(err error) { c.failed(err) }

// failed records a failed Redis operation: the first failure of an outage
// switches every limiter to its local share and logs once.
func (c *Coordinator) failed(err error) {
	if c.ctx.Err() != nil {
		return // closing
	}
	for {
		m := c.mode.Load()
		if m == modeDown {
			return
		}
		if c.mode.CompareAndSwap(m, modeDown) {
			break
		}
	}
	c.fallbacks.Add(1)
	c.lostAt.Store(c.clock())
	for _, l := range c.limiters() {
		l.mu.Lock()
		// Each granted by Redis and not released: Redis counts them. A
		// release on its way is not counted (Redis may have applied it
		// and granted the slot to another gateway). Idle leases count;
		// from now on calls are counted against heldAtLoss.
		l.heldAtLoss = len(l.held)
		l.dropIdleLocked()
		l.mu.Unlock()
	}
	c.upMu.Lock()
	c.upCancel()
	c.upMu.Unlock()
	alive := c.lastAlive()
	c.log.Warn("cluster: redis unreachable: each replica's limit falls back to a local share",
		slog.String("gateway", c.id), slog.Int("gateways_last_seen_alive", len(alive)),
		slog.Int("share", c.share(c.cfg.Limit)), slog.Int("limit", c.cfg.Limit), slog.Any("error", err))
	c.pokeAll()
}

// loop refreshes leases, heartbeat and stats every LeaseTTL/3 while Redis
// answers, and tries to rejoin while it does not.
func (c *Coordinator) loop() {
	t := time.NewTicker(c.cfg.tick)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		if c.mode.Load() == modeDown {
			c.rejoin()
			continue
		}
		if err := c.refresh(); err != nil {
			c.failed(err)
		}
	}
}

// refresh is one round of the live gateway's upkeep: heartbeat (with
// stats), every held lease refreshed, the cluster stats read for metrics.
func (c *Coordinator) refresh() error {
	c.upMu.Lock()
	up := c.upCtx
	c.upMu.Unlock()
	ctx, cancel := context.WithTimeout(up, c.cfg.opTimeout)
	defer cancel()
	if c.mode.Load() != modeUp {
		return nil
	}
	started := c.clock()
	if err := c.heartbeat(ctx); err != nil {
		return err
	}
	for _, l := range c.limiters() {
		n, err := l.sync(ctx, false, nil)
		if err != nil {
			return err
		}
		if n > 0 {
			c.relost.Add(uint64(n))
			c.log.Warn("cluster: leases expired before their refresh and were registered again (the gateway stalled longer than lease_ttl)",
				slog.String("replica", l.name), slog.Int("leases", n))
		}
	}
	c.refreshed.Store(started)
	st, err := c.readStats(ctx)
	if err != nil {
		return fmt.Errorf("cluster: reading the stats: %w", err)
	}
	c.snapMu.Lock()
	c.snap = st
	c.snapMu.Unlock()
	return nil
}

// rejoin runs while Redis is lost: once it answers, every limiter
// registers the calls this gateway runs and reserves the local share of
// the gateways it last saw alive that have not rejoined yet, so that the
// limit holds while the others still serve on their shares; then limits
// are global again. New callers wait meanwhile.
func (c *Coordinator) rejoin() {
	ctx, cancel := c.opCtx()
	defer cancel()
	c.ops[opPing].Add(1)
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		// After a failover the slot has a new owner: read the slot map
		// again rather than keep asking the old one.
		cc.ReloadState(ctx)
	}
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return
	}
	if c.unchecked.Load() { // started degraded: the start-up check first
		if err := c.probe(ctx); err != nil {
			var mis *MisconfiguredError
			if errors.As(err, &mis) && !c.misLogged.Swap(true) {
				c.log.Error("cluster: redis answers but refuses what the cluster needs: staying on local shares until fixed",
					slog.String("gateway", c.id), slog.Any("error", err))
			}
			return
		}
		c.unchecked.Store(false)
	}
	if err := c.replicated(ctx); err != nil {
		// A primary without a replica acknowledging (the replica was
		// promoted and nothing replaced it yet) answers, but every grant
		// would fail its WAIT: stay on the local share rather than flap.
		// Checked before rejoining, as callers get no grant meanwhile.
		if !c.unreplicatedLogged.Swap(true) {
			c.log.Warn("cluster: redis answers but no replica acknowledges its writes: staying on local shares",
				slog.String("gateway", c.id), slog.Int("redis_wait_replicas", c.cfg.WaitReplicas), slog.Any("error", err))
		}
		return
	}
	c.unreplicatedLogged.Store(false)
	if !c.mode.CompareAndSwap(modeDown, modeRejoining) {
		return
	}
	alive := c.lastAlive()
	c.mu.Lock()
	until := time.Now().Add(2 * c.cfg.LeaseTTL) // as the reservations in Redis
	for _, g := range alive {
		if g != c.id {
			c.reserved[g] = until
		}
	}
	c.mu.Unlock()
	started := c.clock()
	for _, l := range c.limiters() {
		share := strconv.Itoa(c.share(l.limit))
		var res []string
		for _, g := range alive {
			if g != c.id {
				res = append(res, g+"|"+share)
			}
		}
		if _, err := l.sync(ctx, true, res); err != nil {
			c.mode.Store(modeDown)
			return
		}
	}
	if err := c.heartbeat(ctx); err != nil {
		c.mode.Store(modeDown)
		return
	}
	c.refreshed.Store(started)
	c.upMu.Lock()
	c.upCtx, c.upCancel = context.WithCancel(c.ctx)
	c.upMu.Unlock()
	if !c.mode.CompareAndSwap(modeRejoining, modeUp) {
		return
	}
	c.log.Info("cluster: redis is back: limits are global again", slog.String("gateway", c.id),
		slog.Int("gateways_alive", len(c.lastAlive())))
	c.announce()
	c.pokeAll()
}

// replicated checks, with Config.WaitReplicas, that that many replicas
// acknowledge a write of the primary owning the deployment's keys within
// the operation time-out, as every grant's WAIT will require.
func (c *Coordinator) replicated(ctx context.Context) error {
	n := c.cfg.WaitReplicas
	if n <= 0 {
		return nil
	}
	key := c.prefix + "wait:" + c.id
	var node redis.Cmdable = c.rdb
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		node = m
	}
	pipe := node.Pipeline()
	pipe.Set(ctx, key, "1", c.cfg.LeaseTTL)
	wait := pipe.Do(ctx, "WAIT", n, c.cfg.opTimeout.Milliseconds())
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	if acked, err := wait.Int(); err != nil || acked < n {
		return cmp.Or(err, errNotReplicated)
	}
	return nil
}

// heartbeat marks this gateway alive, publishes its stats and learns
// which gateways are alive.
func (c *Coordinator) heartbeat(ctx context.Context) error {
	b, _ := json.Marshal(c.localStats())
	c.ops[opHeartbeat].Add(1)
	alive, err := heartbeatScript.Run(ctx, c.rdb, []string{c.prefix + "gw", c.statsKey(c.id)},
		c.id, c.cfg.LeaseTTL.Milliseconds(), b).StringSlice()
	if err != nil {
		return fmt.Errorf("cluster: heartbeat script: %w", err)
	}
	if !slices.Contains(alive, c.id) {
		alive = append(alive, c.id)
	}
	c.mu.Lock()
	c.alive = alive
	c.aliveN = len(alive)
	for _, g := range alive {
		delete(c.reserved, g)
	}
	c.mu.Unlock()
	return nil
}

func (c *Coordinator) statsKey(gw string) string { return c.prefix + "stats:" + gw }

// queueRelease hands lease ids to the releaser, which removes them from
// Redis at once. They are no longer counted as held here.
func (c *Coordinator) queueRelease(l *limiter, ids ...string) {
	c.relMu.Lock()
	c.relPending[l] = append(c.relPending[l], ids...)
	c.relMu.Unlock()
	select {
	case c.relKick <- struct{}{}:
	default:
	}
}

// lingering tells the releaser that a lease became idle: it goes back to
// Redis after PollInterval unless a call takes it.
func (c *Coordinator) lingering() {
	select {
	case c.relSoon <- struct{}{}:
	default:
	}
}

// releaser removes released leases from Redis, batched (one script per
// replica for whatever was released since the last round), and gives
// back the idle leases that are due (see limiter.idle), so a release
// never waits for Redis.
func (c *Coordinator) releaser() {
	t := time.NewTimer(time.Hour)
	t.Stop()
	var due time.Time // when the timer fires; zero: not armed
	for {
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-c.relSoon:
			if due.IsZero() {
				due = time.Now().Add(c.cfg.pollInterval)
				t.Reset(c.cfg.pollInterval)
			}
			continue
		case <-t.C:
			due = time.Time{}
		case <-c.relKick:
		}
		if next := c.flushReleases(c.ctx); !next.IsZero() && (due.IsZero() || next.Before(due)) {
			due = next
			t.Reset(time.Until(next))
		}
	}
}

// flushReleases sends the pending releases and the idle leases due; it
// returns when the next idle lease is due (zero: none idle).
func (c *Coordinator) flushReleases(parent context.Context) (next time.Time) {
	now := time.Now()
	c.relMu.Lock()
	pending := c.relPending
	c.relPending = map[*limiter][]string{}
	c.relMu.Unlock()
	for _, l := range c.limiters() {
		ids, at := l.expireIdle(now)
		if len(ids) > 0 {
			pending[l] = append(pending[l], ids...)
		}
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	if len(pending) == 0 || c.mode.Load() == modeDown {
		return next // a rejoin removes this gateway's stale leases
	}
	ctx, cancel := context.WithTimeout(parent, c.cfg.opTimeout)
	defer cancel()
	for l, ids := range pending {
		if err := l.releaseIDs(ctx, ids); err != nil {
			c.failed(err)
			return next
		}
	}
	return next
}

// Close leaves the cluster: waiters get ErrClosed, this gateway's leases,
// queue places, heartbeat and stats are removed from Redis (best effort,
// within ctx), background work stops. Close the pool first.
func (c *Coordinator) Close(ctx context.Context) error {
	var err error
	c.closeOnce.Do(func() {
		c.bgMu.Lock()
		c.closed = true
		c.bgMu.Unlock()
		for _, l := range c.limiters() {
			l.close()
		}
		c.cancel()
		_ = c.ps.Close()
		c.wg.Wait()
		if c.mode.Load() != modeUp {
			return
		}
		c.flushReleases(ctx)
		for _, l := range c.limiters() {
			if _, e := l.sync(ctx, true, nil); e != nil {
				err = e
				break
			}
			_ = l.leave(ctx)
		}
		c.ops[opBye].Add(1)
		if e := c.rdb.ZRem(ctx, c.prefix+"gw", c.id).Err(); e != nil && err == nil {
			err = e
		}
		c.rdb.Del(ctx, c.statsKey(c.id))
	})
	return err
}

// abandon stops the Coordinator like a crash: nothing is removed from
// Redis. For tests (a killed gateway).
func (c *Coordinator) abandon() {
	c.closeOnce.Do(func() {
		c.bgMu.Lock()
		c.closed = true
		c.bgMu.Unlock()
		for _, l := range c.limiters() {
			l.close()
		}
		c.cancel()
		_ = c.ps.Close()
		c.wg.Wait()
	})
}
