package sessionpool

import (
	"fmt"
	"strings"

	"github.com/gradiopool/gradiopool/internal/waitq"
)

// Priority is the class of a waiting Acquire: when no session is free,
// higher classes are served first, FIFO within a class, and a waiter of a
// lower class is promoted once it has waited Config.PriorityMaxWait (the
// starvation bound). Pass it to
// [Pool.AcquirePriority]; the zero value is PriorityNormal. QueueTimeout applies to
// every class alike.
type Priority int8

// Priority classes, lowest to highest.
const (
	PriorityLow    Priority = -1
	PriorityNormal Priority = 0
	PriorityHigh   Priority = 1
)

// numPriorities is the number of classes; class index = Priority+1.
const numPriorities = waitq.Classes

func (p Priority) String() string {
	switch p {
	case PriorityLow:
		return "low"
	case PriorityNormal:
		return "normal"
	case PriorityHigh:
		return "high"
	}
	return fmt.Sprintf("Priority(%d)", int8(p))
}

// ParsePriority parses "high", "normal" or "low" (any case, surrounding
// spaces ignored); "" is PriorityNormal.
func ParsePriority(s string) (Priority, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "high":
		return PriorityHigh, nil
	case "normal", "":
		return PriorityNormal, nil
	case "low":
		return PriorityLow, nil
	}
	return PriorityNormal, fmt.Errorf("sessionpool: unknown priority %q (want high, normal or low)", s)
}

// clampPriority maps a class outside PriorityLow..PriorityHigh to the
// nearest one, so that a caller's out-of-range value cannot index past
// the wait queue's classes.
func clampPriority(p Priority) Priority { return min(max(p, PriorityLow), PriorityHigh) }

// waitQueue is the wait list of a pool: the shared priority FIFO
// (internal/waitq) of its waiters, counted in n. With a single class in
// use it behaves exactly as one FIFO list.
type waitQueue[T any] struct {
	q waitq.Queue[*waiter[T]]
	n int
}

// setMaxWait sets Config.PriorityMaxWait in pool-clock nanoseconds: a head
// of a lower class that has waited that long is served before younger
// waiters of higher classes. <= 0: never promoted.
func (q *waitQueue[T]) setMaxWait(d int64) { q.q.MaxWait = d }

func (q *waitQueue[T]) push(w *waiter[T]) {
	q.q.Push(&w.link, waitq.ClassOf(int(w.prio)), w.start)
	q.n++
}

func (q *waitQueue[T]) remove(w *waiter[T]) {
	q.q.Remove(&w.link)
	q.n--
}

// next returns the waiter to serve at pool clock now (nil if none): the
// oldest of the class heads that waited PriorityMaxWait or more, if any;
// else the head of the highest non-empty class.
func (q *waitQueue[T]) next(now int64) *waiter[T] {
	if l := q.q.Next(now); l != nil {
		return l.Value
	}
	return nil
}

// popAny removes and returns some waiter (for Close), nil when empty.
func (q *waitQueue[T]) popAny() *waiter[T] {
	if l := q.q.PopAny(); l != nil {
		q.n--
		return l.Value
	}
	return nil
}

// oldestDeadline returns the waiter whose queue time-out comes first: the
// oldest class head with a deadline (every waiter has the same
// QueueTimeout, so within a class the head expires first). nil if none
// has a deadline.
func (q *waitQueue[T]) oldestDeadline() *waiter[T] {
	var first *waiter[T]
	for _, l := range q.q.Heads() {
		if l != nil && l.Value.deadline != 0 && (first == nil || l.Value.deadline < first.deadline) {
			first = l.Value
		}
	}
	return first
}

// waitingByPriority returns the waiters per class, low to high.
func (q *waitQueue[T]) waitingByPriority() [numPriorities]int {
	return q.q.LenByClass()
}
