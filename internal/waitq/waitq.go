// Package waitq is the priority FIFO wait queue shared by the session
// pool (pool/sessionpool) and the cluster limiter (pool/cluster): waiters
// in Classes priority classes, FIFO within a class, the highest class
// served first, and a class head that has waited MaxWait served before
// younger waiters of higher classes (the starvation bound). With one class
// in use it is one FIFO list.
//
// It is intrusive and allocation-free: a waiter embeds a [Link] whose
// Value points back to it. It is not safe for concurrent use: its owner
// guards it with its own lock.
package waitq

// Classes is the number of priority classes: low, normal, high. A class
// index is the priority (-1, 0, 1) plus one.
const Classes = 3

// normal is the class of waiters without a priority.
const normal = 1

// Link is a waiter's place in a [Queue]. Set Value once, to the waiter.
type Link[T any] struct {
	next, prev *Link[T]
	queued     bool
	class      int
	start      int64
	rank       int // position in serving order at the last ranking (see Rank)
	Value      T
}

// Queued reports whether the link is in a queue.
func (l *Link[T]) Queued() bool { return l.queued }

// Start is the time the link was pushed at, in the queue's clock.
func (l *Link[T]) Start() int64 { return l.start }

// Queue is a priority FIFO of links. The zero value is an empty queue
// without promotion.
type Queue[T any] struct {
	heads, tails [Classes]*Link[T]
	counts       [Classes]int
	n            int
	// MaxWait, in the clock of the start and now arguments, is the
	// starvation bound: a class head that has waited this long is served
	// before younger waiters of higher classes. <= 0: strict classes.
	MaxWait int64
	// RankEvery, in the queue's clock, bounds how often Rank walks the
	// queue to number its links again: a 10 000-deep queue polled by
	// each of its waiters is walked at most once per RankEvery, not once
	// per poll. <= 0: at every Rank after a change.
	RankEvery int64
	dirty     bool  // pushed or removed since the last ranking
	rankedAt  int64 // the clock at the last ranking
}

// ClassOf maps a priority (low -1, normal 0, high 1; others clamped) to
// its class index.
func ClassOf(priority int) int { return min(max(priority+1, 0), Classes-1) }

// Len is the number of links queued.
func (q *Queue[T]) Len() int { return q.n }

// LenByClass is the number of links queued per class, low to high.
func (q *Queue[T]) LenByClass() [Classes]int { return q.counts }

// Push appends l to class's list, waiting since start.
func (q *Queue[T]) Push(l *Link[T], class int, start int64) {
	l.class, l.start = class, start
	l.prev, l.next = q.tails[class], nil
	if q.tails[class] == nil {
		q.heads[class] = l
	} else {
		q.tails[class].next = l
	}
	q.tails[class] = l
	l.queued = true
	// Until the next ranking: behind everyone of its class and above.
	l.rank = 0
	for c := class; c < Classes; c++ {
		l.rank += q.counts[c]
	}
	q.counts[class]++
	q.n++
	q.dirty = true
}

// Remove takes l out of the queue (it must be queued).
func (q *Queue[T]) Remove(l *Link[T]) {
	c := l.class
	if l.prev == nil {
		q.heads[c] = l.next
	} else {
		l.prev.next = l.next
	}
	if l.next == nil {
		q.tails[c] = l.prev
	} else {
		l.next.prev = l.prev
	}
	l.next, l.prev, l.queued = nil, nil, false
	q.counts[c]--
	q.n--
	q.dirty = true
}

// Next returns the link to serve at now (nil if none), without removing
// it: the oldest of the class heads that waited MaxWait or more, if any;
// else the head of the highest non-empty class.
func (q *Queue[T]) Next(now int64) *Link[T] {
	if q.n == q.counts[normal] {
		return q.heads[normal] // one class in use (nil if none): plain FIFO
	}
	var best, promoted *Link[T]
	for c := Classes - 1; c >= 0; c-- {
		l := q.heads[c]
		if l == nil {
			continue
		}
		if best == nil {
			best = l
		}
		if q.MaxWait > 0 && now-l.start >= q.MaxWait && (promoted == nil || l.start < promoted.start) {
			promoted = l
		}
	}
	if promoted != nil {
		return promoted
	}
	return best
}

// PopAny removes and returns some link (to empty the queue), nil when
// empty.
func (q *Queue[T]) PopAny() *Link[T] {
	for c := range q.heads {
		if l := q.heads[c]; l != nil {
			q.Remove(l)
			return l
		}
	}
	return nil
}

// Heads are the class heads (nil for an empty class), low to high.
func (q *Queue[T]) Heads() [Classes]*Link[T] { return q.heads }

// All yields every queued link, class by class, oldest first within a
// class. The queue must not change during the iteration.
func (q *Queue[T]) All(yield func(*Link[T]) bool) {
	for _, l := range q.heads {
		for ; l != nil; l = l.next {
			if !yield(l) {
				return
			}
		}
	}
}

// Rank returns l's 0-based place in serving order at now: the links of
// higher classes, then those ahead of it in its class. It ignores the
// starvation bound's promotions (an estimate, as Gradio's own rank is),
// and it may be up to RankEvery old: links pushed since are placed last of
// their class, removals show at the next ranking. -1 when l is not queued.
func (q *Queue[T]) Rank(l *Link[T], now int64) int {
	if !l.queued {
		return -1
	}
	if q.dirty && (q.RankEvery <= 0 || now-q.rankedAt >= q.RankEvery) {
		q.dirty, q.rankedAt = false, now
		r := 0
		for c := Classes - 1; c >= 0; c-- {
			for x := q.heads[c]; x != nil; x = x.next {
				x.rank = r
				r++
			}
		}
	}
	return l.rank
}
