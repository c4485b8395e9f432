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

	// rivals is how many other gateways wait for this replica, as of the
	// last script (at least 1 after a "q|" notice): while some wait, this
	// gateway keeps at most its fair part of the limit (keep).
	rivals atomic.Int32

	mu      sync.Mutex           // guards the fields below; never held during I/O
	waiters waitq.Queue[*waiter] // waiting callers: the session pool's priority FIFO
	// held are the leases Redis counts for this gateway: those of calls
	// running and those idle. A lease leaves held when its release is
	// handed to the releaser, before Redis removes it: a release on its
	// way is never counted as held.
	held map[string]struct{}
	// idle are held leases whose call ended, oldest first: the next call
	// takes one without a Redis round trip; one idle for PollInterval, or
	// beyond keep while other gateways wait, goes back to Redis. So a
	// busy gateway holds leases Redis has acknowledged, not releases.
	idle    []idleLease
	pumping bool
	queued  bool // this gateway may have a place in the Redis queue
	// heldAtLoss is len(held) when Redis was last lost: the leases Redis
	// still counts for this gateway (see Coordinator.localCap).
	heldAtLoss int
	closed     bool
}

// idleLease is a held lease no call uses, since at.
type idleLease struct {
	id string
	at time.Time
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

// heldCount is how many calls run on this gateway's leases (idle leases
// not counted).
func (l *limiter) heldCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held) - len(l.idle)
}

// heldTotal is how many leases Redis counts for this gateway (idle ones
// included).
func (l *limiter) heldTotal() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// keep is how many leases this gateway may keep for its own calls: the
// whole limit while no other gateway waits, else an even part of it
// (possibly 0: then every lease goes back as its call ends).
func (l *limiter) keep() int {
	return l.limit / (int(l.rivals.Load()) + 1)
}

// reuseLocked lends an idle lease, the most recently freed (the oldest
// go back to Redis first); nil when none is idle.
func (l *limiter) reuseLocked() *permit {
	n := len(l.idle)
	if n == 0 {
		return nil
	}
	id := l.idle[n-1].id
	l.idle = l.idle[:n-1]
	l.c.handoffs.Add(1)
	return &permit{l: l, id: id}
}

// expireIdle takes out of held and returns the idle leases to give back
// to Redis at now: those idle for PollInterval, and those beyond keep
// while other gateways wait. next is when the oldest left is due (zero:
// none left).
func (l *limiter) expireIdle(now time.Time) (ids []string, next time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	linger := l.c.cfg.pollInterval
	over := len(l.held) - l.keep()
	i := 0
	for ; i < len(l.idle) && (i < over || now.Sub(l.idle[i].at) >= linger); i++ {
		ids = append(ids, l.idle[i].id)
		delete(l.held, l.idle[i].id)
	}
	l.idle = l.idle[i:]
	if len(l.idle) > 0 {
		next = l.idle[0].at.Add(linger)
	}
	return ids, next
}

// dropIdleLocked forgets the idle leases (Redis lost, or closing): they
// are no longer held here, and Redis lets them lapse or the next sync
// removes them.
func (l *limiter) dropIdleLocked() {
	for _, il := range l.idle {
		delete(l.held, il.id)
	}
	l.idle = nil
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
	// Fast paths: no one waits and an idle lease is at hand, or, while
	// Redis is lost, the share has room.
	if l.waiters.Len() == 0 {
		if p := l.reuseLocked(); p != nil {
			l.mu.Unlock()
			return p, nil
		}
		if down && len(l.held) < l.c.localCap(l.limit, l.heldAtLoss) {
			p := l.grantLocked(l.leaseID(l.c.seq.Add(1)))
			l.mu.Unlock()
			return p, nil
		}
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
		for l.waiters.Len() > 0 && len(l.idle) > 0 { // freed as the waiter came
			w := l.nextLocked()
			l.waiters.Remove(&w.link)
			w.granted = true
			w.ch <- l.reuseLocked()
		}
		want := l.waiters.Len()
		l.mu.Unlock()
		if want == 0 {
			continue
		}
		first := l.c.seq.Add(uint64(want)) - uint64(want) + 1
		ctx, cancel := l.c.opCtx()
		got, err := l.take(ctx, want, first)
		cancel()
		if err != nil {
			l.c.failed(err)
			continue
		}
		extra := false
		l.mu.Lock()
		l.queued = got < want
		for i := range got {
			id := l.leaseID(first + uint64(i))
			if !l.handLocked(id) { // its caller gave up meanwhile
				l.held[id] = struct{}{}
				l.idle = append(l.idle, idleLease{id: id, at: time.Now()})
				extra = true
			}
		}
		more := l.waiters.Len() > 0
		l.mu.Unlock()
		if extra {
			l.c.lingering()
		}
		if more && got < want {
			wait(l.c.cfg.pollInterval)
		}
	}
}

// take runs acquireScript for want leases numbered from first.
func (l *limiter) take(ctx context.Context, want int, first uint64) (int, error) {
	args := []any{l.c.id, l.c.id + ":", first, want,
		l.limit, l.c.cfg.LeaseTTL.Milliseconds(), l.c.channel(), l.name, l.c.cfg.placeTTL.Milliseconds(), l.heldTotal()}
	l.c.ops[opAcquire].Add(1)
	res, err := l.c.runAcquire(ctx, l.keys, args, l.c.cfg.opTimeout)
	if err != nil {
		return 0, fmt.Errorf("cluster: acquire script: %w", err)
	}
	l.rivals.Store(int32(res[2]))
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
	return nil
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
	l.mu.Unlock()
	l.c.ops[opSync].Add(1)
	out, err := syncScript.Run(ctx, l.c.rdb, []string{l.keys[0], l.keys[3], l.c.prefix + "gw", l.keys[1]}, args...).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("cluster: sync script: %w", err)
	}
	// The backstop of the "q|" notices: the gateways waiting, seen here
	// every LeaseTTL/3 even by a gateway that runs no acquire script.
	l.rivals.Store(int32(out[1]))
	return int(out[0]), nil
}

// close wakes every waiter with ErrClosed.
func (l *limiter) close() {
	l.mu.Lock()
	l.closed = true
	l.failAllLocked(ErrClosed)
	l.dropIdleLocked() // Close's sync removes them from Redis
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

// Release gives the lease back. While Redis answers, this gateway keeps
// it if it holds no more than keep: for the oldest caller waiting here,
// or else idle for the next call (see idle); beyond keep (other gateways
// wait) it goes back to Redis at once. While Redis is lost it is only
// forgotten. Calling it again does nothing.
func (p *permit) Release() {
	if p.done.Swap(true) {
		return
	}
	l := p.l
	l.mu.Lock()
	if !l.closed && l.c.mode.Load() == modeUp && len(l.held) <= l.keep() {
		if l.handLocked(p.id) {
			l.mu.Unlock()
			l.c.handoffs.Add(1)
			return
		}
		l.idle = append(l.idle, idleLease{id: p.id, at: time.Now()})
		l.mu.Unlock()
		l.c.lingering()
		return
	}
	delete(l.held, p.id)
	l.mu.Unlock()
	if l.c.mode.Load() != modeDown && !l.c.isClosed() {
		l.c.queueRelease(l, p.id)
	}
	l.poke()
}
