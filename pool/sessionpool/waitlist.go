package sessionpool

import (
	"time"

	"github.com/gradiopool/gradiopool/internal/waitq"
)

// waiter is one Acquire in the FIFO queue.
type waiter[T any] struct {
	link     waitq.Link[*waiter[T]] // its place in the wait queue; link.Value is the waiter
	prio     Priority               // class of the Acquire (see AcquirePriority)
	start    int64                  // pool clock when it joined
	served   int64                  // pool clock when it was handed a session
	deadline int64                  // pool clock when it times out; 0: never
	ch       chan waitResult[T]     // buffered (1): the pool sends exactly one result per wait, under mu
}

// queued reports whether w waits in the queue.
func (w *waiter[T]) queued() bool { return w.link.Queued() }

type waitResult[T any] struct {
	s   *Session[T]
	err error
}

// expireWaiters is queueTimer's callback: it fails the waiters whose
// deadline passed. They are at the heads of the class lists, as every
// waiter has the same QueueTimeout.
func (p *Pool[T]) expireWaiters() {
	now := p.now()
	p.mu.Lock()
	p.queueArmed = false
	if p.closed {
		p.mu.Unlock()
		return
	}
	var evs []Event
	for w := p.waitq.oldestDeadline(); w != nil && w.deadline <= now; w = p.waitq.oldestDeadline() {
		p.waitq.remove(w)
		p.stat.QueueTimeouts++
		w.ch <- waitResult[T]{err: ErrQueueTimeout}
		if p.hooks {
			ev := p.eventLocked(EventQueueTimeout)
			ev.Duration = time.Duration(now - w.start)
			evs = append(evs, ev)
		}
	}
	if w := p.waitq.oldestDeadline(); w != nil {
		p.queueArmed = true
		p.queueTimer.Reset(time.Duration(w.deadline - now))
	}
	if len(evs) > 0 {
		p.emitting++
	}
	p.mu.Unlock()
	if len(evs) > 0 {
		for _, ev := range evs[:len(evs)-1] {
			p.emit(ev)
		}
		p.emitHeld(evs[len(evs)-1])
	}
}
