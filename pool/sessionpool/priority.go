package sessionpool

import (
	"context"
	"fmt"
	"strings"
)

// Priority is the class of a waiting Acquire: when no session is free,
// higher classes are served first, FIFO within a class, and a waiter of a
// lower class is promoted once it has waited Config.PriorityMaxWait (the
// starvation bound). Attach it to the Acquire's context with
// [WithPriority]; the zero value is PriorityNormal. QueueTimeout applies to
// every class alike.
type Priority int8

// Priority classes, lowest to highest.
const (
	PriorityLow    Priority = -1
	PriorityNormal Priority = 0
	PriorityHigh   Priority = 1
)

// numPriorities is the number of classes; class index = Priority+1.
const numPriorities = 3

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

type priorityKey struct{}

// WithPriority returns a context whose Acquires wait in class p. Values
// outside PriorityLow..PriorityHigh are clamped.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, min(max(p, PriorityLow), PriorityHigh))
}

// PriorityFrom returns the class set by WithPriority (PriorityNormal if none).
func PriorityFrom(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}

// waitQueue is the wait list of a pool: one FIFO list per priority class.
// With a single class in use it behaves exactly as one FIFO list.
type waitQueue[T any] struct {
	lists [numPriorities]waitList[T]
	n     int
	// maxWait is Config.PriorityMaxWait in pool-clock nanoseconds: a head
	// of a lower class that has waited that long is served before younger
	// waiters of higher classes. <= 0: never promoted.
	maxWait int64
}

func (q *waitQueue[T]) push(w *waiter[T]) {
	q.lists[w.prio+1].pushBack(w)
	q.n++
}

func (q *waitQueue[T]) remove(w *waiter[T]) {
	q.lists[w.prio+1].remove(w)
	q.n--
}

// next returns the waiter to serve at pool clock now (nil if none): the
// oldest of the class heads that waited PriorityMaxWait or more, if any;
// else the head of the highest non-empty class.
func (q *waitQueue[T]) next(now int64) *waiter[T] {
	if q.n == q.lists[PriorityNormal+1].n {
		return q.lists[PriorityNormal+1].head // one class in use (nil if none): plain FIFO
	}
	return q.nextByClass(now)
}

// nextByClass is next when waiters of several classes wait.
func (q *waitQueue[T]) nextByClass(now int64) *waiter[T] {
	var best, promoted *waiter[T]
	for c := numPriorities - 1; c >= 0; c-- {
		w := q.lists[c].head
		if w == nil {
			continue
		}
		if best == nil {
			best = w
		}
		if q.maxWait > 0 && now-w.start >= q.maxWait && (promoted == nil || w.start < promoted.start) {
			promoted = w
		}
	}
	if promoted != nil {
		return promoted
	}
	return best
}

// popAny removes and returns some waiter (for Close), nil when empty.
func (q *waitQueue[T]) popAny() *waiter[T] {
	for c := range q.lists {
		if w := q.lists[c].popFront(); w != nil {
			q.n--
			return w
		}
	}
	return nil
}

// oldestDeadline returns the waiter whose queue time-out comes first: the
// oldest class head with a deadline (every waiter has the same
// QueueTimeout, so within a class the head expires first). nil if none
// has a deadline.
func (q *waitQueue[T]) oldestDeadline() *waiter[T] {
	var first *waiter[T]
	for c := range q.lists {
		if w := q.lists[c].head; w != nil && w.deadline != 0 && (first == nil || w.deadline < first.deadline) {
			first = w
		}
	}
	return first
}

// waitingByPriority returns the waiters per class, low to high.
func (q *waitQueue[T]) waitingByPriority() [numPriorities]int {
	var out [numPriorities]int
	for c := range q.lists {
		out[c] = q.lists[c].n
	}
	return out
}
