package waitq

import (
	"fmt"
	"testing"
)

type waiter struct {
	name string
	link Link[*waiter]
}

func push(q *Queue[*waiter], name string, class int, start int64) *waiter {
	w := &waiter{name: name}
	w.link.Value = w
	q.Push(&w.link, class, start)
	return w
}

func drain(q *Queue[*waiter], now int64) string {
	var out []string
	for l := q.Next(now); l != nil; l = q.Next(now) {
		q.Remove(l)
		out = append(out, l.Value.name)
	}
	return fmt.Sprint(out)
}

// TestOrder: highest class first, FIFO within a class.
func TestOrder(t *testing.T) {
	var q Queue[*waiter]
	push(&q, "low0", ClassOf(-1), 0)
	push(&q, "normal1", ClassOf(0), 1)
	push(&q, "high2", ClassOf(1), 2)
	push(&q, "normal3", ClassOf(0), 3)
	if q.Len() != 4 || q.LenByClass() != [Classes]int{1, 2, 1} {
		t.Fatalf("Len %d, by class %v", q.Len(), q.LenByClass())
	}
	if got := drain(&q, 100); got != "[high2 normal1 normal3 low0]" {
		t.Errorf("served %s", got)
	}
	if q.Len() != 0 || q.Next(0) != nil {
		t.Error("not empty after draining")
	}
}

// TestPromotion: a head that waited MaxWait goes before younger waiters of
// higher classes (the oldest such first); MaxWait <= 0 never promotes, and
// exactly MaxWait promotes.
func TestPromotion(t *testing.T) {
	for _, tc := range []struct {
		maxWait int64
		now     int64
		want    string
	}{
		{0, 100, "[high2 normal1 low0]"},
		{-1, 100, "[high2 normal1 low0]"},
		{10, 9, "[high2 normal1 low0]"},
		{10, 10, "[low0 high2 normal1]"},
		{10, 11, "[low0 normal1 high2]"},
	} {
		q := Queue[*waiter]{MaxWait: tc.maxWait}
		push(&q, "low0", ClassOf(-1), 0)
		push(&q, "normal1", ClassOf(0), 1)
		push(&q, "high2", ClassOf(1), 2)
		if got := drain(&q, tc.now); got != tc.want {
			t.Errorf("MaxWait %d at %d: served %s, want %s", tc.maxWait, tc.now, got, tc.want)
		}
	}
}

// TestRemoveAndPopAny: removing from the middle keeps the order; PopAny
// empties the queue; ClassOf clamps.
func TestRemoveAndPopAny(t *testing.T) {
	var q Queue[*waiter]
	a := push(&q, "a", 1, 0)
	b := push(&q, "b", 1, 1)
	push(&q, "c", 1, 2)
	q.Remove(&b.link)
	if b.link.Queued() || !a.link.Queued() {
		t.Error("Queued wrong after Remove")
	}
	if got := drain(&q, 0); got != "[a c]" {
		t.Errorf("served %s", got)
	}
	push(&q, "x", 0, 0)
	push(&q, "y", 2, 0)
	n := 0
	for q.PopAny() != nil {
		n++
	}
	if n != 2 || q.Len() != 0 {
		t.Errorf("PopAny took %d, left %d", n, q.Len())
	}
	if ClassOf(-5) != 0 || ClassOf(7) != Classes-1 {
		t.Error("ClassOf does not clamp")
	}
}

// TestRank: serving order over classes, a push placed last of its class
// until the next ranking, removals shown at the next ranking, at most one
// walk per RankEvery.
func TestRank(t *testing.T) {
	q := Queue[*waiter]{RankEvery: 10}
	a := push(&q, "a", 1, 0)
	b := push(&q, "b", 1, 1)
	c := push(&q, "c", 1, 2)
	if got := []int{q.Rank(&a.link, 0), q.Rank(&b.link, 0), q.Rank(&c.link, 0)}; fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("ranks %v", got)
	}
	h := push(&q, "h", 2, 3) // high: first once ranked
	if r := q.Rank(&h.link, 10); r != 0 {
		t.Errorf("high rank %d, want 0", r)
	}
	if r := q.Rank(&c.link, 10); r != 3 {
		t.Errorf("c rank %d after a high push, want 3", r)
	}
	q.Remove(&a.link)
	if r := q.Rank(&c.link, 15); r != 3 {
		t.Errorf("c rank %d before RankEvery passed, want the old 3", r)
	}
	if r := q.Rank(&c.link, 20); r != 2 {
		t.Errorf("c rank %d after the removal, want 2", r)
	}
	if r := q.Rank(&a.link, 20); r != -1 {
		t.Errorf("removed link rank %d, want -1", r)
	}
	l := push(&q, "low", 0, 21)
	if r := q.Rank(&l.link, 21); r != 3 {
		t.Errorf("low pushed rank %d, want 3 (last)", r)
	}
}

// TestRankBoundedWalks: with RankEvery set, a deep queue polled by every
// waiter after each change is walked once per RankEvery, not per poll.
func TestRankBoundedWalks(t *testing.T) {
	q := Queue[*waiter]{RankEvery: 100}
	var ws []*waiter
	for i := range 10000 {
		ws = append(ws, push(&q, fmt.Sprint(i), 1, int64(i)))
	}
	q.Rank(&ws[0].link, 0)
	for now := int64(1); now < 100; now++ {
		q.Remove(q.Next(now))
		for _, w := range ws[now:] {
			q.Rank(&w.link, now)
		}
		if q.rankedAt != 0 {
			t.Fatalf("walked again at %d, before RankEvery", now)
		}
	}
	if r := q.Rank(&ws[9999].link, 100); r != 9999-99 {
		t.Errorf("last rank %d after 99 served, want %d", r, 9999-99)
	}
}

// BenchmarkRank10000: one ranking walk of a 10 000-deep queue (what a
// moving queue costs once per RankEvery), and a waiter's look between
// walks.
func BenchmarkRank10000(b *testing.B) {
	var q Queue[*waiter]
	var ws []*waiter
	for i := range 10000 {
		ws = append(ws, push(&q, "w", 1, int64(i)))
	}
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			q.dirty = true
			q.Rank(&ws[9999].link, 0)
		}
	})
	b.Run("look", func(b *testing.B) {
		q.RankEvery = 1 << 62
		for b.Loop() {
			q.Rank(&ws[5000].link, 1)
		}
	})
}
