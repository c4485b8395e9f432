package sessionpool

import (
	"time"
)

// waiter is one Acquire in the FIFO queue.
type waiter[T any] struct {
	next, prev *waiter[T]
	queued     bool
	prio       Priority           // class of the Acquire (see WithPriority)
	start      int64              // pool clock when it joined
	served     int64              // pool clock when it was handed a session
	deadline   int64              // pool clock when it times out; 0: never
	ch         chan waitResult[T] // buffered (1): the pool sends exactly one result per wait, under mu
}

type waitResult[T any] struct {
	s   *Session[T]
	err error
}

// waitList is an intrusive doubly linked FIFO list of waiters.
type waitList[T any] struct {
	head, tail *waiter[T]
	n          int
}

func (l *waitList[T]) pushBack(w *waiter[T]) {
	w.prev, w.next = l.tail, nil
	if l.tail == nil {
		l.head = w
	} else {
		l.tail.next = w
	}
	l.tail = w
	w.queued = true
	l.n++
}

func (l *waitList[T]) remove(w *waiter[T]) {
	if w.prev == nil {
		l.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		l.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.next, w.prev, w.queued = nil, nil, false
	l.n--
}

func (l *waitList[T]) popFront() *waiter[T] {
	w := l.head
	if w != nil {
		l.remove(w)
	}
	return w
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
