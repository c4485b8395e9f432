package sessionpool

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/internal/waitq"
)

// Pool is a pool of sessions of type T for one replica. It is safe for
// concurrent use. Create it with [New]; it connects nothing until first used.
type Pool[T any] struct {
	cfg        Config[T] // normalized; read-only after New
	epoch      time.Time // zero of the pool clock (see now)
	hooks      bool      // OnEvent or Logger set
	retires    bool      // MaxLifetime or IdleDisconnect set: idle sessions may be due for retirement
	baseCtx    context.Context
	cancelBase context.CancelFunc // cancels every Connect and Check: called by Close
	drained    chan struct{}      // closed when Close has nothing left to wait for

	// waiters recycles wait-queue entries so that a waiting Acquire does not
	// allocate. It is per pool so that their channels belong to the pool's
	// synctest bubble in tests.
	waiters sync.Pool

	canceledAcquires atomic.Int64 // also counted on paths that never take mu

	// mu guards every field below. It is held only for bookkeeping and
	// hand-offs: Connect, Close, Check and the hooks never run under it
	// (they run in goroutines started under it, or after it is released).
	mu          sync.Mutex
	closed      bool
	initialized bool
	idle        []*item[T] // sorted by lastUsed, oldest first; the end is the most recently used
	waitq       waitQueue[T]
	open        int // idle + inUse + checking
	inUse       int
	checking    int // items out for a health check
	connecting  int // Connect calls in flight, stale ones included
	stale       int // of connecting: started before the last Reset; their sessions will be discarded
	closing     int // Config.Close calls in flight
	emitting    int // hook calls from the pool's own goroutines in flight (Close waits for them)
	unhealthy   int // open items with failures > 0
	resetGen    uint64
	nextID      uint64

	retryRound      int  // refill retries since the last successful connect (for the back-off)
	backoff         bool // a connect failed: the MinSessions refill waits for retryTimer (or a success)
	retryArmed      bool // retryTimer pending
	reapParked      bool // reapTimer not armed because nothing could expire; a release re-arms it
	queueArmed      bool // queueTimer pending
	checksInFlight  int
	lastHealthCheck time.Time
	stat            Stat // counters; gauges are filled in by Stat

	// Timers, created at initialisation (in the pool's synctest bubble, for
	// tests) and stopped by Close. Their callbacks take mu themselves.
	queueTimer  *time.Timer // expires the oldest waiters (FIFO: the oldest has the earliest deadline)
	reapTimer   *time.Timer // idle removal and MaxLifetime retirement
	healthTimer *time.Timer // next round of health checks
	retryTimer  *time.Timer // next MinSessions refill after a failed connect
	demandTimer *time.Timer // next demand sample (Config.DemandWindow; see warmup.go)

	demandAvg    float64 // moving average of inUse + waiting
	demandParked bool    // demandTimer not armed: the pool was quiet
}

// New returns a pool for cfg (defaults applied to zero fields). It starts
// no goroutine and connects nothing: the first Acquire (or Warm) does.
func New[T any](cfg Config[T]) (*Pool[T], error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool[T]{
		cfg:        cfg,
		epoch:      time.Now(),
		hooks:      cfg.OnEvent != nil || cfg.Logger != nil,
		retires:    cfg.MaxLifetime > 0 || cfg.IdleDisconnect > 0,
		baseCtx:    ctx,
		cancelBase: cancel,
		drained:    make(chan struct{}),
		idle:       make([]*item[T], 0, cfg.MaxSessions),
	}
	p.waiters.New = func() any {
		w := &waiter[T]{ch: make(chan waitResult[T], 1)}
		w.link.Value = w
		return w
	}
	p.waitq.setMaxWait(int64(cfg.PriorityMaxWait))
	p.waitq.q.RankEvery = int64(rankEvery)
	return p, nil
}

// rankEvery bounds how often a waiter's rank is computed again (see
// waitq.Queue.RankEvery): ranks shown to callers may be this old.
const rankEvery = 100 * time.Millisecond

// now is the pool clock: monotonic nanoseconds since New. (time.Since is
// cheaper than time.Now, and it follows a synctest bubble's fake clock.)
func (p *Pool[T]) now() int64 { return int64(time.Since(p.epoch)) }

// Acquire returns a session: the most recently used idle one; else a new
// one if the pool is below MaxSessions (the connect keeps going if ctx ends
// first, and its session then serves the next waiter); else it waits in a
// FIFO queue for the next released session. Waiters are served strictly in
// arrival order, whether by a released session or a new one.
//
// Errors: ErrQueueTimeout after Config.QueueTimeout; ctx's error when ctx
// ends first (counted in Stat.CanceledAcquires); ErrQueueFull at once when
// MaxWaiters callers already wait; ErrPoolClosed. A *ConnectError when a
// connect failed and no other connect was in flight for this caller (the
// oldest waiter gets it): so a caller of a broken replica learns at once,
// while a caller of a healthy one is not failed by one bad connect among
// several.
//
// The first Acquire initialises the pool: it starts MinSessions connects in
// parallel and is served by whichever is ready first.
//
// Acquire waits in class PriorityNormal; see AcquirePriority.
func (p *Pool[T]) Acquire(ctx context.Context) (*Session[T], error) {
	return p.AcquirePriority(ctx, PriorityNormal)
}

// AcquirePriority is Acquire waiting in class prio when no session is free
// (values outside PriorityLow..PriorityHigh are clamped). The class is a
// parameter, not a context value, so that it cannot leak into calls made
// further down with the same context.
func (p *Pool[T]) AcquirePriority(ctx context.Context, prio Priority) (*Session[T], error) {
	if err := ctx.Err(); err != nil {
		p.canceledAcquires.Add(1)
		return nil, err
	}
	// The queue time-out runs from the call, not from when the caller got
	// the lock: under a burst of callers the wait for mu alone reached tens
	// of milliseconds (docs/BENCHMARKS.md, 10 000 waiters).
	entered := p.now()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrPoolClosed
	}
	if !p.initialized {
		p.initLocked(ctx)
		if p.hooks {
			ev := p.eventLocked(EventInit)
			p.mu.Unlock()
			p.emit(ev)
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				return nil, ErrPoolClosed
			}
		}
	}
	// Fast path: the most recently used idle session. No waiter can be
	// queued while a session is idle (every release serves the queue
	// first), so taking it here never jumps the queue.
	if n := len(p.idle); n > 0 && !p.retires {
		it := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		it.state = stateInUse
		p.inUse++
		p.stat.AcquireCount++
		s := it.handle()
		if p.cfg.DemandWindow > 0 {
			p.demandLocked()
		}
		p.mu.Unlock()
		return s, nil
	}
	return p.acquireSlow(ctx, entered, clampPriority(prio))
}

// acquireSlow is Acquire beyond the common case: MaxLifetime checks,
// growth and waiting.
// WARNING: caller must hold p.mu; acquireSlow releases it.
func (p *Pool[T]) acquireSlow(ctx context.Context, entered int64, prio Priority) (*Session[T], error) {
	now := p.now()
	retired := false
	for n := len(p.idle); n > 0; n = len(p.idle) {
		it := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		if p.expiredLocked(it, now) {
			p.destroyLocked(it, ReasonLifetime)
			retired = true
			continue
		}
		it.state = stateInUse
		p.inUse++
		p.stat.AcquireCount++
		s := it.handle()
		if retired {
			p.growLocked()
		}
		if p.cfg.DemandWindow > 0 {
			p.demandLocked()
		}
		p.mu.Unlock()
		return s, nil
	}

	if p.cfg.MaxWaiters >= 0 && p.waitq.n >= p.cfg.MaxWaiters {
		p.stat.QueueFull++
		ev := p.eventLocked(EventQueueFull)
		p.mu.Unlock()
		if p.hooks {
			p.emit(ev)
		}
		return nil, ErrQueueFull
	}

	w := p.waiters.Get().(*waiter[T])
	w.start = entered
	w.prio = prio
	w.deadline = 0
	if p.cfg.QueueTimeout > 0 {
		w.deadline = entered + int64(p.cfg.QueueTimeout)
		if !p.queueArmed {
			p.queueArmed = true
			p.queueTimer.Reset(time.Duration(w.deadline - now))
		}
	}
	p.waitq.push(w)
	p.stat.EmptyAcquireCount++
	p.growForLocked(ctx)
	if p.cfg.DemandWindow > 0 {
		p.demandLocked()
	}
	var ev Event
	if p.hooks {
		ev = p.eventLocked(EventWaiterAdded)
	}
	p.mu.Unlock()
	if p.hooks {
		p.emit(ev)
	}
	// A watcher (the front door showing the caller its place) sees the
	// wait; Left runs before w is reused (waitq.Watcher).
	left := func() {}
	if wt := waitq.WatcherFrom(ctx); wt != nil {
		wt.Queued(func() (int, int) {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.waitq.q.Rank(&w.link, p.now()), p.waitq.n
		})
		left = wt.Left
	}

	select {
	case r := <-w.ch:
		left()
		p.waiters.Put(w)
		if r.err == nil && p.hooks {
			p.emit(Event{Kind: EventWaiterServed, SessionID: r.s.it.id, Duration: time.Duration(p.now() - entered)})
		}
		return r.s, r.err
	case <-ctx.Done():
	}

	p.mu.Lock()
	if w.queued() {
		p.waitq.remove(w)
		p.canceledAcquires.Add(1)
		ev := p.eventLocked(EventAcquireCanceled)
		p.mu.Unlock()
		left()
		p.waiters.Put(w)
		if p.hooks {
			ev.Err = ctx.Err()
			ev.Duration = time.Duration(p.now() - entered)
			p.emit(ev)
		}
		return nil, ctx.Err()
	}
	// The pool served w while ctx was ending: its result is in the channel
	// or about to be (a Release sends after unlocking mu).
	p.mu.Unlock()
	r := <-w.ch
	waited := w.served - w.start
	left()
	p.waiters.Put(w)
	if r.err != nil {
		return nil, r.err
	}
	// A session: the caller gave up, so hand it on as if never acquired.
	p.mu.Lock()
	p.stat.AcquireCount--
	p.stat.AcquireDuration -= time.Duration(waited)
	p.mu.Unlock()
	p.canceledAcquires.Add(1)
	r.s.Release()
	if p.hooks {
		p.emit(Event{Kind: EventAcquireCanceled, Err: ctx.Err(), Duration: time.Duration(p.now() - entered)})
	}
	return nil, ctx.Err()
}

// AcquireFunc acquires a session, calls f with it and releases it, whatever
// f returns. It returns Acquire's error or f's.
func (p *Pool[T]) AcquireFunc(ctx context.Context, f func(T) error) error {
	s, err := p.Acquire(ctx)
	if err != nil {
		return err
	}
	defer s.Release()
	return f(s.Value())
}

// Warm initialises the pool now, as the first Acquire would (starting
// MinSessions connects in the background), and returns at once. It does
// nothing on a pool already in use or closed.
func (p *Pool[T]) Warm() {
	p.mu.Lock()
	if p.closed || p.initialized {
		p.mu.Unlock()
		return
	}
	p.initLocked(context.Background())
	ev := p.eventLocked(EventInit)
	p.mu.Unlock()
	if p.hooks {
		p.emit(ev)
	}
}

// initLocked starts the timers and the MinSessions connects.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) initLocked(ctx context.Context) {
	p.initialized = true
	p.queueTimer = stoppedTimer(p.expireWaiters)
	p.retryTimer = stoppedTimer(p.retryRefill)
	p.reapTimer = stoppedTimer(p.reap)
	p.healthTimer = stoppedTimer(p.healthRound)
	p.demandTimer = stoppedTimer(p.sampleDemand)
	p.demandParked = true // armed by the first Acquire when DemandWindow > 0
	if p.cfg.IdleTimeout > 0 || p.retires {
		p.reapParked = true // armed by the first session to go idle
	}
	if p.cfg.Check != nil && p.cfg.HealthCheckInterval > 0 {
		p.healthTimer.Reset(p.jitter(p.cfg.HealthCheckInterval))
	}
	p.growForLocked(ctx)
}

// eventLocked returns an event of kind k with the queue and size gauges.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) eventLocked(k EventKind) Event {
	return Event{Kind: k, Waiting: p.waitq.n, Total: p.open + p.connecting}
}

// expiredLocked reports whether it is due for retirement at now: past
// MaxLifetime, or (idle) close to the app's IdleDisconnect.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) expiredLocked(it *item[T], now int64) bool {
	if !p.retires {
		return false
	}
	at := p.retireAtLocked(it, p.renewLeadLocked())
	return at > 0 && now >= at
}

// release takes back an item acquired by Session.Release.
func (p *Pool[T]) release(it *item[T]) {
	now := p.now()
	p.mu.Lock()
	p.inUse--
	it.lastUsed = now
	if it.renewing && p.retireAtLocked(it, p.renewLeadLocked()) > now+p.renewLeadLocked() {
		it.renewing = false // used again: its idle deadline moved on
	}
	// open > MaxSessions: SetLimits lowered the maximum while it was in use.
	if p.closed || it.gen != p.resetGen || p.expiredLocked(it, now) || p.open > p.cfg.MaxSessions {
		reason := ReasonLifetime
		switch {
		case p.closed:
			reason = ReasonClosed
		case it.gen != p.resetGen:
			reason = ReasonReset
		case p.open > p.cfg.MaxSessions:
			reason = ReasonIdle
		}
		p.destroyLocked(it, reason)
		p.growLocked()
		p.mu.Unlock()
		return
	}
	if w := p.waitq.next(now); w != nil {
		s := p.assignLocked(it, w, now)
		p.mu.Unlock()
		w.ch <- waitResult[T]{s: s} // outside mu: shorter critical section under contention
		return
	}
	it.state = stateIdle
	if n := len(p.idle); n > 0 && p.idle[n-1].lastUsed > now {
		// A concurrent Release read the clock later but got mu first:
		// keep idle sorted (by a few nanoseconds' adjustment).
		it.lastUsed = p.idle[n-1].lastUsed
	}
	p.idle = append(p.idle, it)
	if p.reapParked {
		p.unparkReapLocked()
	}
	p.mu.Unlock()
}

// putLocked gives a new or just-checked item (not counted as idle or in
// use) to the oldest waiter, or makes it idle in lastUsed order.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) putLocked(it *item[T], now int64) {
	if w := p.waitq.next(now); w != nil {
		p.handOffLocked(it, w, now)
		return
	}
	it.state = stateIdle
	i, _ := slices.BinarySearchFunc(p.idle, it.lastUsed, func(x *item[T], t int64) int {
		if x.lastUsed <= t {
			return -1
		}
		return 1
	})
	p.idle = slices.Insert(p.idle, i, it)
	if p.reapParked {
		p.unparkReapLocked()
	}
}

// handOffLocked gives it to waiter w (the next of the queue).
// WARNING: caller must hold p.mu.
func (p *Pool[T]) handOffLocked(it *item[T], w *waiter[T], now int64) {
	w.ch <- waitResult[T]{s: p.assignLocked(it, w, now)}
}

// assignLocked takes waiter w (the next of the queue) out of the queue and
// returns the handle of it for w; the caller must then send it on w.ch,
// under mu or after releasing it (w.ch has room, and w, being out of the
// queue, waits for exactly that send).
// WARNING: caller must hold p.mu.
func (p *Pool[T]) assignLocked(it *item[T], w *waiter[T], now int64) *Session[T] {
	p.waitq.remove(w)
	it.state = stateInUse
	p.inUse++
	p.stat.AcquireCount++
	p.stat.AcquireDuration += time.Duration(now - w.start)
	w.served = now
	return it.handle()
}

// destroyInUse takes back an item by Session.Destroy.
func (p *Pool[T]) destroyInUse(it *item[T]) {
	p.mu.Lock()
	p.inUse--
	reason := ReasonError
	if p.closed {
		reason = ReasonClosed
	}
	p.destroyLocked(it, reason)
	p.growLocked()
	p.mu.Unlock()
}

// destroyLocked removes it (already taken out of idle, in-use or checking
// accounting) from the pool and closes it in the background.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) destroyLocked(it *item[T], reason Reason) {
	p.open--
	if it.failures > 0 {
		p.unhealthy--
	}
	switch reason {
	case ReasonIdle:
		p.stat.DestroyedIdle++
	case ReasonHealth:
		p.stat.DestroyedHealth++
	case ReasonError:
		p.stat.DestroyedError++
	case ReasonLifetime:
		p.stat.DestroyedLifetime++
	case ReasonReset:
		p.stat.DestroyedReset++
	case ReasonClosed:
		p.stat.DestroyedClosed++
	}
	p.closing++
	go p.closeValue(it.value, it.id, reason)
}

// closeValue runs Config.Close for a session already removed from the
// pool's accounting (except closing).
func (p *Pool[T]) closeValue(v T, id uint64, reason Reason) {
	if p.cfg.Close != nil {
		p.cfg.Close(v)
	}
	p.mu.Lock()
	p.closing--
	var ev Event
	if p.hooks {
		ev = p.eventLocked(EventDestroyed)
		p.emitting++
	}
	p.checkDrainedLocked()
	p.mu.Unlock()
	if p.hooks {
		ev.SessionID, ev.Reason = id, reason
		p.emitHeld(ev)
	}
}

// emitHeld emits an event counted in p.emitting, then lets Close proceed.
// WARNING: never call it with p.mu held.
func (p *Pool[T]) emitHeld(ev Event) {
	p.emit(ev)
	p.mu.Lock()
	p.emitting--
	p.checkDrainedLocked()
	p.mu.Unlock()
}

// checkDrainedLocked closes p.drained once Close has nothing left to wait for.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) checkDrainedLocked() {
	if p.closed && p.inUse == 0 && p.checking == 0 && p.connecting == 0 && p.closing == 0 && p.emitting == 0 {
		select {
		case <-p.drained:
		default:
			close(p.drained)
		}
	}
}

// Close shuts the pool: it stops its timers, fails waiting and later
// Acquires with ErrPoolClosed, cancels connects and checks in flight,
// closes idle sessions at once and sessions in use as they are released,
// and waits until every session has been closed or ctx ends (then it
// returns ctx's error; the remaining sessions are still closed on
// release). Calling Close again waits in the same way.
func (p *Pool[T]) Close(ctx context.Context) error {
	p.mu.Lock()
	first := !p.closed
	var evs []Event
	if first {
		p.closed = true
		p.cancelBase()
		if p.initialized {
			p.queueTimer.Stop()
			p.reapTimer.Stop()
			p.healthTimer.Stop()
			p.retryTimer.Stop()
			p.demandTimer.Stop()
		}
		for w := p.waitq.popAny(); w != nil; w = p.waitq.popAny() {
			w.ch <- waitResult[T]{err: ErrPoolClosed}
		}
		for i, it := range p.idle {
			p.destroyLocked(it, ReasonClosed)
			p.idle[i] = nil
		}
		p.idle = p.idle[:0]
		p.checkDrainedLocked()
		evs = append(evs, p.eventLocked(EventClosed))
	}
	p.mu.Unlock()
	if p.hooks {
		for _, ev := range evs {
			p.emit(ev)
		}
	}
	select {
	case <-p.drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sessionpool: close: %w", ctx.Err())
	}
}
