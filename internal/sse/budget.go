package sse

import (
	"fmt"
	"sync/atomic"
)

// DefaultAllowance is what each Reader holds of a line or event before it
// charges its Budget: Gradio's usual messages (heartbeats, estimations,
// small outputs) never touch the shared count.
const DefaultAllowance = 64 << 10

// ErrBudgetExhausted is returned by Next when the Budget shared by the
// Readers is used up. It wraps ErrEventTooLarge: for the stream's calls it
// is the same fault (a replica sends more than can be held), with a cause
// of its own in the message.
var ErrBudgetExhausted = fmt.Errorf("%w: the bytes held by every stream's partly read events, in total, reached their limit", ErrEventTooLarge)

// Budget bounds the bytes that the Readers sharing it hold in partly read
// lines and events, beyond each Reader's allowance. The per-line limit
// alone bounds one stream; many streams of a hostile replica, each just
// under it, add up to gigabytes.
//
// It is an atomic count and not a semaphore (golang.org/x/sync/semaphore):
// a Reader over its share never waits for bytes to free up, it fails its
// stream at once. Waiting would keep its own bytes held meanwhile, and the
// streams holding the rest are as likely to be the hostile ones.
type Budget struct {
	free  atomic.Int64
	total int64
}

// NewBudget returns a Budget of total bytes; total <= 0 returns nil, which
// Readers take as no limit.
func NewBudget(total int64) *Budget {
	if total <= 0 {
		return nil
	}
	b := &Budget{total: total}
	b.free.Store(total)
	return b
}

// Total is the Budget's size in bytes.
func (b *Budget) Total() int64 {
	if b == nil {
		return 0
	}
	return b.total
}

// Held is how many bytes the Readers hold of it now.
func (b *Budget) Held() int64 {
	if b == nil {
		return 0
	}
	return b.total - b.free.Load()
}

// Take reserves n bytes and reports whether they were free; it never
// waits. A nil Budget always grants.
func (b *Budget) Take(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		f := b.free.Load()
		if f < n {
			return false
		}
		if b.free.CompareAndSwap(f, f-n) {
			return true
		}
	}
}

// Give returns n bytes taken before.
func (b *Budget) Give(n int64) {
	if b != nil && n > 0 {
		b.free.Add(n)
	}
}

// account is what a Reader has taken from its Budget. It lives apart from
// the Reader so that a Reader dropped without Release gives its bytes
// back when it is collected (runtime.AddCleanup must not reach the Reader).
type account struct {
	budget  *Budget
	charged atomic.Int64
}

func (a *account) refund() { a.budget.Give(a.charged.Swap(0)) }
