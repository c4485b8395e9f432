package sessionpool

import (
	"context"
	"time"
)

// Pre-emptive renewal: an idle session that is about to be retired (past
// MaxLifetime, or idle for almost Config.IdleDisconnect, after which the
// app drops it) gets its replacement connected first, renewLead before,
// so that the pool never has a gap while the new session connects. A
// session in use is never cut: it is retired when released.

// minRenewLead bounds renewLead from below for connects that take
// (almost) no time.
const minRenewLead = time.Millisecond

// renewLeadLocked is how long before an idle session's retirement its
// replacement starts connecting: twice the average connect time so far.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) renewLeadLocked() int64 {
	lead := int64(minRenewLead)
	if n := p.stat.Created + p.stat.ConnectFailures; n > 0 {
		lead = max(lead, 2*int64(p.stat.ConnectDuration)/n)
	}
	if d := p.cfg.IdleDisconnect; d > 0 {
		lead = min(lead, int64(d)/4)
	}
	return lead
}

// retireAtLocked is the pool clock at which idle it is retired: its
// MaxLifetime expiry, or renewLead before the app's idle disconnect,
// whichever comes first; 0: never.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) retireAtLocked(it *item[T], lead int64) int64 {
	at := it.expires
	if d := int64(p.cfg.IdleDisconnect); d > 0 {
		if t := it.lastUsed + d - lead; at == 0 || t < at {
			at = t
		}
	}
	return at
}

// renewLocked starts the replacements of idle sessions whose retirement is
// within renewLead at now (as long as MaxSessions allows) and returns the
// delay until the next renewal or retirement, -1 if none.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) renewLocked(now int64) int64 {
	lead := p.renewLeadLocked()
	next := int64(-1)
	soonest := func(d int64) {
		if next < 0 || d < next {
			next = d
		}
	}
	for _, it := range p.idle {
		at := p.retireAtLocked(it, lead)
		if at == 0 {
			continue
		}
		if it.renewing {
			soonest(at - now)
			continue
		}
		if now < at-lead {
			soonest(at - lead - now)
			continue
		}
		if p.closed || p.backoff || p.open+p.connecting >= p.cfg.MaxSessions {
			soonest(at - now) // no room: it is replaced after retirement
			continue
		}
		it.renewing = true
		p.connecting++
		p.stat.Renewals++
		go p.connect(context.Background(), p.resetGen)
		soonest(at - now)
	}
	return next
}
