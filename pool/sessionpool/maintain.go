package sessionpool

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"
)

func stoppedTimer(f func()) *time.Timer {
	t := time.AfterFunc(time.Hour, f)
	t.Stop()
	return t
}

// jitter returns d varied randomly by ±HealthCheckJitter.
func (p *Pool[T]) jitter(d time.Duration) time.Duration {
	span := int64(float64(d) * HealthCheckJitter)
	if span <= 0 {
		return d
	}
	return d - time.Duration(span) + time.Duration(rand.Int64N(2*span+1))
}

// unparkReapLocked arms reapTimer for a session that has just gone idle.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) unparkReapLocked() {
	p.reapParked = false
	d := p.cfg.IdleTimeout
	for _, lt := range []time.Duration{p.cfg.MaxLifetime, p.cfg.IdleDisconnect} {
		if lt > 0 && (d <= 0 || lt < d) {
			d = lt
		}
	}
	if p.retires {
		// Retirement may be due sooner (renewLead ahead): reap computes
		// the exact time on its first run.
		d = min(d, time.Duration(p.renewLeadLocked()))
	}
	p.reapTimer.Reset(d)
}

// reap is reapTimer's callback: it closes sessions idle for longer than
// IdleTimeout (oldest first, never below MinSessions) and retires idle
// sessions past MaxLifetime (replacing them), then re-arms itself for the
// next possible expiry, or parks until a session goes idle.
func (p *Pool[T]) reap() {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.retires {
		kept := p.idle[:0]
		for _, it := range p.idle {
			if p.expiredLocked(it, now) {
				p.destroyLocked(it, ReasonLifetime)
			} else {
				kept = append(kept, it)
			}
		}
		clear(p.idle[len(kept):])
		p.idle = kept
	}
	if idle := int64(p.cfg.IdleTimeout); idle > 0 {
		n := 0
		for n < len(p.idle) && p.open > p.cfg.MinSessions && now-p.idle[n].lastUsed >= idle {
			p.destroyLocked(p.idle[n], ReasonIdle)
			n++
		}
		if n > 0 {
			p.idle = slices.Delete(p.idle, 0, n)
		}
	}
	p.growLocked()

	next := int64(-1)
	if idle := int64(p.cfg.IdleTimeout); idle > 0 && len(p.idle) > 0 && p.open > p.cfg.MinSessions {
		next = p.idle[0].lastUsed + idle - now
	}
	if p.retires {
		if d := p.renewLocked(now); d >= 0 && (next < 0 || d < next) {
			next = d
		}
	}
	if next < 0 {
		p.reapParked = true
		return
	}
	p.reapTimer.Reset(time.Duration(max(next, 1)))
}

// healthRound is healthTimer's callback: it checks up to HealthCheckMax of
// the least recently used idle sessions, each in its own goroutine; the
// timer is re-armed when the round is over.
func (p *Pool[T]) healthRound() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.lastHealthCheck = time.Now()
	n := len(p.idle)
	if m := p.cfg.HealthCheckMax; m >= 0 {
		n = min(n, m)
	}
	if n == 0 {
		p.healthTimer.Reset(p.jitter(p.cfg.HealthCheckInterval))
		return
	}
	for _, it := range p.idle[:n] {
		it.state = stateChecking
		p.checking++
		p.checksInFlight++
		go p.check(it)
	}
	p.idle = slices.Delete(p.idle, 0, n)
}

// check runs one Config.Check on it (out of the idle set meanwhile).
func (p *Pool[T]) check(it *item[T]) {
	ctx, cancel := p.baseCtx, context.CancelFunc(func() {})
	if p.cfg.HealthCheckTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, p.cfg.HealthCheckTimeout)
	}
	start := p.now()
	err := p.cfg.Check(ctx, it.value)
	cancel()
	now := p.now()

	p.mu.Lock()
	p.checking--
	p.checksInFlight--
	if p.closed {
		// Close cancelled the check: neither a pass nor a failure.
		p.destroyLocked(it, ReasonClosed)
		p.checkDrainedLocked()
		p.mu.Unlock()
		return
	}
	p.stat.HealthChecks++
	if err != nil {
		p.stat.HealthCheckFailures++
		if it.failures == 0 {
			p.unhealthy++
		}
		it.failures++
	} else if it.failures > 0 {
		it.failures = 0
		p.unhealthy--
	}
	failures := it.failures
	switch {
	case it.gen != p.resetGen:
		p.destroyLocked(it, ReasonReset)
		p.growLocked()
	case p.cfg.UnhealthyAfter > 0 && it.failures >= p.cfg.UnhealthyAfter:
		p.destroyLocked(it, ReasonHealth)
		p.growLocked()
	default:
		p.putLocked(it, now) // lastUsed unchanged: a check is not a use
	}
	if p.checksInFlight == 0 {
		p.healthTimer.Reset(p.jitter(p.cfg.HealthCheckInterval))
	}
	var ev Event
	if p.hooks {
		ev = p.eventLocked(EventHealthCheck)
		p.emitting++
	}
	p.checkDrainedLocked()
	p.mu.Unlock()
	if p.hooks {
		ev.SessionID, ev.Err, ev.Failures, ev.Duration = it.id, err, failures, time.Duration(now-start)
		p.emitHeld(ev)
	}
}

// Reset is for when the app behind the pool restarted or changed: idle
// sessions are destroyed now, sessions in use when released, sessions under
// check after their check, and sessions still connecting when ready; the
// pool then rebuilds MinSessions (if it has been initialised).
func (p *Pool[T]) Reset() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.resetGen++
	p.stale = p.connecting
	for i, it := range p.idle {
		p.destroyLocked(it, ReasonReset)
		p.idle[i] = nil
	}
	p.idle = p.idle[:0]
	p.retryRound = 0
	p.backoff = false
	if p.retryArmed {
		p.retryArmed = false
		p.retryTimer.Stop()
	}
	p.growLocked()
	ev := p.eventLocked(EventReset)
	p.mu.Unlock()
	if p.hooks {
		p.emit(ev)
	}
}
