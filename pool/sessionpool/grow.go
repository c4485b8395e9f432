package sessionpool

import (
	"context"
	"math/rand/v2"
	"time"
)

// growLocked is growForLocked without a caller to lend values.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) growLocked() { p.growForLocked(context.Background()) }

// growForLocked starts connects while the pool is below MaxSessions and either
// waiters outnumber the connects in flight for them, or (unless a refill
// back-off is pending) open sessions plus those connects are below
// MinSessions. vctx lends its values (not its cancellation) to the first
// connect.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) growForLocked(vctx context.Context) {
	if p.closed || !p.initialized {
		return
	}
	if p.backoff && !p.retryArmed {
		p.armRetryLocked()
	}
	for p.open+p.connecting < p.cfg.MaxSessions {
		covered := p.connecting - p.stale
		if p.waitq.n <= covered && (p.backoff || p.open+covered >= p.cfg.MinSessions) {
			return
		}
		p.connecting++
		go p.connect(vctx, p.resetGen)
		vctx = context.Background()
	}
}

// connect runs one Config.Connect and files its result.
func (p *Pool[T]) connect(vctx context.Context, gen uint64) {
	ctx := p.baseCtx
	if vctx != context.Background() {
		ctx = valueCancelCtx{values: vctx, Context: p.baseCtx}
	}
	cancel := context.CancelFunc(func() {})
	if p.cfg.ConnectTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, p.cfg.ConnectTimeout)
	}
	start := p.now()
	v, err := p.cfg.Connect(ctx)
	cancel()
	now := p.now()

	p.mu.Lock()
	p.connecting--
	stale := gen != p.resetGen
	if stale {
		p.stale--
	}
	p.stat.ConnectDuration += time.Duration(now - start)
	if err != nil && p.closed {
		// Close cancelled the connect: not a failure of the replica.
		p.checkDrainedLocked()
		p.mu.Unlock()
		return
	}
	if err != nil {
		p.stat.ConnectFailures++
		p.backoff = true
		cerr := &ConnectError{Err: err}
		// A waiter left without a connect in flight for it gets this
		// error (the oldest, as the queue serves everything in order)
		// rather than waiting out its time-out on a failing replica.
		if p.waitq.n > p.connecting-p.stale {
			w := p.waitq.next(now)
			p.waitq.remove(w)
			w.ch <- waitResult[T]{err: cerr}
		}
		p.armRetryLocked()
		p.growLocked()
		var ev Event
		if p.hooks {
			ev = p.eventLocked(EventConnectFailed)
			p.emitting++
		}
		p.checkDrainedLocked()
		p.mu.Unlock()
		if p.hooks {
			ev.Err, ev.Duration = err, time.Duration(now-start)
			p.emitHeld(ev)
		}
		return
	}
	p.stat.Created++
	p.nextID++
	id := p.nextID
	if p.closed || stale {
		// Count it open so that destroyLocked's accounting balances.
		p.open++
		reason := ReasonClosed
		if !p.closed {
			reason = ReasonReset
		}
		p.destroyLocked(&item[T]{value: v, id: id}, reason)
		p.growLocked()
		p.mu.Unlock()
		return
	}
	p.retryRound = 0
	p.backoff = false
	if p.retryArmed {
		p.retryArmed = false
		p.retryTimer.Stop()
	}
	it := &item[T]{pool: p, value: v, id: id, gen: gen, created: now, lastUsed: now}
	if lt := p.cfg.MaxLifetime; lt > 0 {
		// Shortened by up to LifetimeJitter so that sessions connected
		// together (the MinSessions at start) are not all replaced at once.
		it.expires = now + int64(lt) - rand.Int64N(int64(float64(lt)*LifetimeJitter)+1)
	}
	p.open++
	p.putLocked(it, now)
	p.growLocked()
	var ev Event
	if p.hooks {
		ev = p.eventLocked(EventConnected)
		p.emitting++
	}
	p.mu.Unlock()
	if p.hooks {
		ev.SessionID, ev.Duration = id, time.Duration(now-start)
		p.emitHeld(ev)
	}
}

// armRetryLocked schedules the MinSessions refill after a failed connect,
// once no other connect is in flight (the last one to fail arms it), backing
// off exponentially with every round that fails.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) armRetryLocked() {
	if p.closed || p.retryArmed || p.connecting-p.stale > 0 {
		return
	}
	if p.open >= p.cfg.MinSessions {
		p.backoff = false // nothing to refill: a later shortfall refills at once
		return
	}
	d := p.cfg.RetryDelay
	for i := 0; i < p.retryRound && d < p.cfg.MaxRetryDelay; i++ {
		d *= 2
	}
	d = min(d, p.cfg.MaxRetryDelay)
	p.retryRound++
	p.retryArmed = true
	p.retryTimer.Reset(d)
}

// retryRefill is retryTimer's callback.
func (p *Pool[T]) retryRefill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.retryArmed {
		return // a connect succeeded meanwhile, or Reset
	}
	p.retryArmed = false
	p.backoff = false
	p.growLocked()
}

// valueCancelCtx takes its values from values and everything else
// (deadline, cancellation) from the embedded Context.
type valueCancelCtx struct {
	context.Context
	values context.Context
}

func (c valueCancelCtx) Value(key any) any { return c.values.Value(key) }
