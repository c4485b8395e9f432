package sessionpool

import (
	"time"

	"github.com/gradiopool/gradiopool/internal/waitq"
)

// SetLimits changes the pool's size and time-outs in place, for a
// configuration reload: cfg's MinSessions, MaxSessions, MaxWaiters,
// QueueTimeout and IdleTimeout (zero means the default, as in [New]); every
// other field of cfg must be left zero, since it cannot change after New.
// Sessions in use are never cut: above a lower MaxSessions, idle sessions
// are closed now and sessions in use when they are released. A higher
// MaxSessions serves waiters at once. Callers already waiting keep their
// queue place; their deadline follows the new QueueTimeout, counted from
// when they started waiting (so deadlines stay in arrival order).
func (p *Pool[T]) SetLimits(cfg Config[T]) error {
	cfg.Connect = p.cfg.Connect // normalize wants one; it is not changed
	n, err := cfg.normalize()
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.MinSessions, p.cfg.MaxSessions = n.MinSessions, n.MaxSessions
	p.cfg.MaxWaiters = n.MaxWaiters
	queueChanged := p.cfg.QueueTimeout != n.QueueTimeout
	p.cfg.QueueTimeout, p.cfg.IdleTimeout = n.QueueTimeout, n.IdleTimeout
	if p.closed {
		return nil
	}
	if queueChanged && p.initialized {
		p.waitq.q.All(func(l *waitq.Link[*waiter[T]]) bool {
			w := l.Value
			w.deadline = 0
			if p.cfg.QueueTimeout > 0 {
				w.deadline = w.start + int64(p.cfg.QueueTimeout)
			}
			return true
		})
		p.queueTimer.Stop()
		p.queueArmed = false
		if w := p.waitq.oldestDeadline(); w != nil {
			p.queueArmed = true
			p.queueTimer.Reset(time.Duration(max(w.deadline-p.now(), 1)))
		}
	}
	// Close idle sessions above the new maximum, oldest first.
	k := 0
	for k < len(p.idle) && p.open > p.cfg.MaxSessions {
		p.destroyLocked(p.idle[k], ReasonIdle)
		k++
	}
	if k > 0 {
		p.idle = append(p.idle[:0], p.idle[k:]...)
	}
	if !p.initialized {
		return nil
	}
	p.growLocked()
	if !p.reapParked && p.reapTimer != nil && (p.cfg.IdleTimeout > 0 || p.retires) {
		// An armed reap may be set for the old idle time-out: run it soon,
		// it re-arms itself for the new one.
		p.reapTimer.Reset(time.Millisecond)
	} else if p.reapParked && len(p.idle) > 0 && p.cfg.IdleTimeout > 0 {
		p.unparkReapLocked()
	}
	return nil
}
