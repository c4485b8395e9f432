package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/internal/waitq"
	"github.com/gradiopool/gradiopool/pool"
)

// limiter is one replica's share of the cluster in this gateway: a local
// FIFO of waiting callers, served by one pump goroutine (alive only while
// callers wait) that asks Redis for leases on behalf of the oldest ones,
// or, while Redis is lost, grants up to the local share.
type limiter struct {
	c     *Coordinator
	name  string
	limit int
	keys  []string // holders, queue, queue expiry, reserved, seq, gateways

	wake chan struct{} // buffered 1: a release, a notice, a mode change

	// contended is set while other gateways wait for this replica (as of
	// the last script, or a "q|" notice); while it is clear, a released
	// lease goes straight to the next local waiter, without Redis.
	contended atomic.Bool

	mu      sync.Mutex           // guards the fields below; never held during I/O
	waiters waitq.Queue[*waiter] // waiting callers: the session pool's priority FIFO
	held    map[string]struct{}  // lease ids of permits not released
	pumping bool
	queued  bool // this gateway may have a place in the Redis queue
	// releasing counts leases released here whose removal Redis has not
	// acknowledged yet (queued for the releaser, carried by an acquire, or
	// in flight): Redis still counts them for this gateway.
	releasing int
	// heldAtLoss is len(held) + releasing when Redis was last lost: the
	// leases Redis still counts for this gateway (see
	// Coordinator.localCap). Under load most of them are releases on
	// their way: counting only the calls still running left the gateway
	// "0" and no call ran for a whole LeaseTTL.
	heldAtLoss int
	closed     bool
}

type waiter struct {
	ch      chan *permit // buffered 1; nil value: err
	err     error        // why nil was sent (set before the send)
	link    waitq.Link[*waiter]
	granted bool
}

func newLimiter(c *Coordinator, name string) *limiter {
	b := c.prefix + "sem:" + name + ":"
	return &limiter{
		c: c, name: name, limit: c.cfg.Limit,
		keys: []string{b + "h", b + "q", b + "qx", b + "r", c.prefix + "seq", c.prefix + "gw"},
		wake: make(chan struct{}, 1), held: map[string]struct{}{},
		// negative MaxWait: strict classes; ranks shown to waiting callers
		// are computed again at most every 100 ms (waitq.Queue.RankEvery)
		waiters: waitq.Queue[*waiter]{MaxWait: int64(c.cfg.PriorityMaxWait), RankEvery: int64(100 * time.Millisecond)},
	}
}

func (l *limiter) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *limiter) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiters.Len()
}

func (l *limiter) heldCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// leaseID is the id of this gateway's lease number n.
func (l *limiter) leaseID(n uint64) string {
	return l.c.id + ":" + strconv.FormatUint(n, 10)
}

func (l *limiter) acquire(ctx context.Context, prio pool.Priority) (pool.Permit, error) {
	if l.c.isClosed() {
		return nil, ErrClosed
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	down := l.c.mode.Load() == modeDown
	if down && l.c.cfg.OnRedisLoss == FailClosed {
		l.mu.Unlock()
		return nil, fmt.Errorf("cluster: replica %s: %w", l.name, ErrRedisDown)
	}
	// Fast path while Redis is lost: no one waits and the share has room.
	if l.waiters.Len() == 0 && down && len(l.held) < l.c.localCap(l.limit, l.heldAtLoss) {
		p := l.grantLocked(l.leaseID(l.c.seq.Add(1)))
		l.mu.Unlock()
		return p, nil
	}
	if mw := l.c.cfg.MaxWaiters; mw > 0 && l.waiters.Len() >= mw {
		l.mu.Unlock()
		return nil, fmt.Errorf("cluster: replica %s: %d callers wait for a lease: %w", l.name, l.waiters.Len(), pool.ErrQueueFull)
	}
	w := &waiter{ch: make(chan *permit, 1)}
	w.link.Value = w
	l.waiters.Push(&w.link, waitq.ClassOf(int(prio)), l.c.clock())
	start := !l.pumping
	l.pumping = true
	l.mu.Unlock()
	if start {
		if !l.c.goBackground(l.pump) { // closed meanwhile
			l.mu.Lock()
			l.pumping = false
			if !w.granted {
				l.waiters.Remove(&w.link)
			}
			l.mu.Unlock()
			return nil, ErrClosed
		}
	} else {
		l.poke()
	}
	// A watcher (the gateway showing the caller its place) sees the wait
	// among this gateway's waiters for the replica.
	if wt := waitq.WatcherFrom(ctx); wt != nil {
		wt.Queued(func() (int, int) {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.waiters.Rank(&w.link, l.c.clock()), l.waiters.Len()
		})
		defer wt.Left()
	}
	select {
	case p := <-w.ch:
		if p == nil {
			return nil, w.err
		}
		return p, nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	if !w.granted {
		l.waiters.Remove(&w.link)
		l.mu.Unlock()
		l.poke() // the pump may now have no one to serve
		return nil, ctx.Err()
	}
	l.mu.Unlock()
	if p := <-w.ch; p != nil { // granted as the context ended
		p.Release()
	}
	return nil, ctx.Err()
}

// nextLocked is the waiter to serve next, as the session pool serves its
// own (internal/waitq): the oldest of the highest class, except that a
// class head that has waited PriorityMaxWait goes first (the oldest such).
func (l *limiter) nextLocked() *waiter {
	if lk := l.waiters.Next(l.c.clock()); lk != nil {
		return lk.Value
	}
	return nil
}

// grantLocked records lease id as held and returns its permit.
func (l *limiter) grantLocked(id string) *permit {
	l.held[id] = struct{}{}
	return &permit{l: l, id: id}
}

// handLocked gives lease id to the oldest waiter; false when none waits.
func (l *limiter) handLocked(id string) bool {
	w := l.nextLocked()
	if w == nil {
		return false
	}
	l.waiters.Remove(&w.link)
	w.granted = true
	w.ch <- l.grantLocked(id)
	return true
}

// pump serves the waiters, oldest first, until none is left.
func (l *limiter) pump() {
	poll := time.NewTimer(time.Hour)
	defer poll.Stop()
	wait := func(d time.Duration) {
		poll.Reset(d)
		select {
		case <-l.wake:
		case <-poll.C:
		case <-l.c.ctx.Done():
		}
	}
	for {
		l.mu.Lock()
		if l.waiters.Len() == 0 || l.closed {
			l.pumping = false
			leave := l.queued && !l.closed
			l.queued = false
			l.mu.Unlock()
			if leave && l.c.mode.Load() == modeUp {
				ctx, cancel := l.c.opCtx()
				if err := l.leave(ctx); err != nil {
					l.c.failed(err)
				}
				cancel()
			}
			return
		}
		want := l.waiters.Len()
		switch l.c.mode.Load() {
		case modeDown:
			if l.c.cfg.OnRedisLoss == FailClosed {
				l.failAllLocked(fmt.Errorf("cluster: replica %s: %w", l.name, ErrRedisDown))
				l.queued = false
				l.mu.Unlock()
				continue
			}
			share := l.c.localCap(l.limit, l.heldAtLoss)
			for l.waiters.Len() > 0 && len(l.held) < share {
				l.handLocked(l.leaseID(l.c.seq.Add(1)))
			}
			left := l.waiters.Len()
			l.queued = false // a rejoin starts with a fresh queue place
			l.mu.Unlock()
			if left > 0 {
				wait(l.c.cfg.tick)
			}
			continue
		case modeRejoining:
			l.mu.Unlock()
			wait(l.c.cfg.pollInterval)
			continue
		}
		l.mu.Unlock()
		first := l.c.seq.Add(uint64(want)) - uint64(want) + 1
		ctx, cancel := l.c.opCtx()
		got, err := l.take(ctx, want, first)
		cancel()
		if err != nil {
			l.c.failed(err)
			continue
		}
		var extra []string
		l.mu.Lock()
		l.queued = got < want
		for i := range got {
			id := l.leaseID(first + uint64(i))
			if !l.handLocked(id) {
				extra = append(extra, id) // its caller gave up meanwhile
			}
		}
		more := l.waiters.Len() > 0
		l.mu.Unlock()
		if len(extra) > 0 {
			l.c.queueRelease(l, false, extra...)
		}
		if more && got < want {
			wait(l.c.cfg.pollInterval)
		}
	}
}

// take runs acquireScript for want leases numbered from first.
func (l *limiter) take(ctx context.Context, want int, first uint64) (int, error) {
	rel := l.c.takeReleases(l) // carried: removed before the grant, one round trip
	args := make([]any, 0, 9+len(rel))
	args = append(args, l.c.id, l.c.id+":", first, want,
		l.limit, l.c.cfg.LeaseTTL.Milliseconds(), l.c.channel(), l.name, l.c.cfg.placeTTL.Milliseconds())
	for _, id := range rel {
		args = append(args, id)
	}
	l.c.ops[opAcquire].Add(1)
	// On an error the carried releases are dropped: the gateway is then
	// in local mode, and its rejoin removes every lease it no longer holds.
	res, err := l.c.runAcquire(ctx, l.keys, args, l.c.cfg.opTimeout)
	if err != nil {
		return 0, fmt.Errorf("cluster: acquire script: %w", err)
	}
	l.acked(len(rel))
	l.contended.Store(res[2] > 0)
	l.c.seen(int(res[3]))
	return int(res[0]), nil
}

// errNotReplicated: a grant no replica acknowledged in time. After a
// failover the old primary still answers for a moment, and what it grants
// is lost: such a grant is not used (the gateway goes local, and its rejoin
// registers its calls on the new primary).
var errNotReplicated = errors.New("cluster: the grant was not acknowledged by a replica in time (a failover?)")

// runAcquire runs the acquire script; with Config.WaitReplicas, it runs it and WAIT n in one pipeline (one
// round trip) on the primary owning the keys, and returns the script's
// answer only when n replicas have it: a grant lost in a failover (written
// on the old primary, never replicated) would let the limit be exceeded.
//
// waitFor bounds the WAIT (at most until ctx ends).
func (c *Coordinator) runAcquire(ctx context.Context, keys []string, args []any, waitFor time.Duration) ([]int64, error) {
	n := c.cfg.WaitReplicas
	if n <= 0 {
		return acquireScript.Run(ctx, c.rdb, keys, args...).Int64Slice()
	}
	var node redis.Cmdable = c.rdb
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		node = m
	}
	for try := 0; ; try++ {
		pipe := node.Pipeline()
		script := acquireScript.EvalSha(ctx, pipe, keys, args...)
		wait := pipe.Do(ctx, "WAIT", n, waitFor.Milliseconds())
		_, _ = pipe.Exec(ctx)
		if err := script.Err(); err != nil {
			if try == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
				if err := acquireScript.Load(ctx, node).Err(); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		acked, err := wait.Int()
		if err != nil {
			return nil, err
		}
		if acked < n {
			return nil, errNotReplicated
		}
		return script.Int64Slice()
	}
}

// releaseIDs removes leases from Redis.
func (l *limiter) releaseIDs(ctx context.Context, ids []string) error {
	args := make([]any, 0, len(ids)+2)
	args = append(args, l.c.channel(), l.name)
	for _, id := range ids {
		args = append(args, id)
	}
	l.c.ops[opRelease].Add(1)
	if err := releaseScript.Run(ctx, l.c.rdb, l.keys[:2], args...).Err(); err != nil {
		return fmt.Errorf("cluster: release script: %w", err)
	}
	l.acked(len(ids))
	return nil
}

// releasingAdd counts n releases on their way to Redis.
func (l *limiter) releasingAdd(n int) {
	l.mu.Lock()
	l.releasing += n
	l.mu.Unlock()
}

// acked records that Redis removed n released leases. Acknowledged after
// Redis was lost, they are no longer counted there either.
func (l *limiter) acked(n int) {
	if n == 0 {
		return
	}
	l.mu.Lock()
	l.releasing = max(0, l.releasing-n)
	if l.c.mode.Load() != modeUp {
		l.heldAtLoss = max(0, l.heldAtLoss-n)
	}
	l.mu.Unlock()
}

// leave takes this gateway out of the replica's Redis queue.
func (l *limiter) leave(ctx context.Context) error {
	l.c.ops[opLeave].Add(1)
	if err := leaveScript.Run(ctx, l.c.rdb, []string{l.keys[1], l.keys[2]}, l.c.id, l.c.channel(), l.name).Err(); err != nil {
		return fmt.Errorf("cluster: leave script: %w", err)
	}
	return nil
}

// sync runs syncScript with the leases held now (see there); res are the
// reservations to write when full.
func (l *limiter) sync(ctx context.Context, full bool, res []string) (int, error) {
	l.mu.Lock()
	args := make([]any, 0, 4+len(res)+len(l.held))
	f := "0"
	if full {
		f = "1"
	}
	args = append(args, l.c.id, l.c.cfg.LeaseTTL.Milliseconds(), f, len(res))
	for _, r := range res {
		args = append(args, r)
	}
	for id := range l.held {
		args = append(args, id)
	}
	releasing := l.releasing
	l.mu.Unlock()
	l.c.ops[opSync].Add(1)
	out, err := syncScript.Run(ctx, l.c.rdb, []string{l.keys[0], l.keys[3], l.c.prefix + "gw", l.keys[1]}, args...).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("cluster: sync script: %w", err)
	}
	if full {
		// Redis now holds exactly the leases held here: the releases
		// counted before the sync are done (a later ack finds the count
		// at zero).
		l.mu.Lock()
		l.releasing = max(0, l.releasing-releasing)
		l.mu.Unlock()
	}
	// The backstop of the "q|" notices (at most once): a gateway waiting
	// unseen is seen here, every LeaseTTL/3.
	if out[1] > 0 {
		l.contended.Store(true)
	}
	return int(out[0]), nil
}

// close wakes every waiter with ErrClosed.
func (l *limiter) close() {
	l.mu.Lock()
	l.closed = true
	l.failAllLocked(ErrClosed)
	l.mu.Unlock()
	l.poke()
}

// failAllLocked ends every wait with err.
func (l *limiter) failAllLocked(err error) {
	for lk := l.waiters.PopAny(); lk != nil; lk = l.waiters.PopAny() {
		w := lk.Value
		w.granted = true
		w.err = err
		w.ch <- nil
	}
}

// permit is one lease held by a call.
type permit struct {
	l    *limiter
	id   string
	done atomic.Bool
}

// Release gives the lease back: while no other gateway waits for the
// replica and a caller of this gateway does, straight to the oldest such
// caller (the lease stays in Redis, no round trip); else at once locally
// and to Redis in the releaser's next batch. Calling it again does
// nothing.
func (p *permit) Release() {
	if p.done.Swap(true) {
		return
	}
	l := p.l
	l.mu.Lock()
	if l.waiters.Len() > 0 && !l.closed && !l.contended.Load() && l.c.mode.Load() == modeUp {
		delete(l.held, p.id)
		l.handLocked(p.id)
		l.mu.Unlock()
		l.c.handoffs.Add(1)
		return
	}
	delete(l.held, p.id)
	l.mu.Unlock()
	if l.c.mode.Load() != modeDown && !l.c.isClosed() {
		l.c.queueRelease(l, l.contended.Load(), p.id)
	}
	l.poke()
}
