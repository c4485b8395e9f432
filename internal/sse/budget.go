package sse

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultAllowance is what each Reader holds of a line or event before it
// charges its Budget: Gradio's usual messages (heartbeats, estimations,
// small outputs) never touch the shared count.
const DefaultAllowance = 64 << 10

// DefaultRateFloor and DefaultRateWindow are a Budget's byte-rate floor: a
// Reader that holds bytes of it (a partly read event past its allowance)
// must read at least DefaultRateFloor bytes a second over each
// DefaultRateWindow, or its stream is cut. A replica writes an event it
// has computed at network speed; one that sends most of a large event and
// then trickles the rest (or nothing) would otherwise hold its bytes for
// as long as it likes without ever tripping a stall rule.
const (
	DefaultRateFloor  = 32 << 10
	DefaultRateWindow = 10 * time.Second
)

// ErrBudgetExhausted is returned by Next when the Budget shared by the
// Readers is used up. It wraps ErrEventTooLarge: for the stream's calls it
// is the same fault (a replica sends more than can be held), with a cause
// of its own in the message.
var ErrBudgetExhausted = fmt.Errorf("%w: the bytes held by every stream's partly read events, in total, reached their limit", ErrEventTooLarge)

// ErrBudgetReclaimed ends a stream whose part of the Budget (its replica)
// held more than its fair share when another part, under its own, needed
// room: the stream holding the most of it is cut, so that the failure
// falls on the replica that took the budget, not on a healthy one.
var ErrBudgetReclaimed = fmt.Errorf("%w: this stream's replica held more than its fair share of the event budget while another replica needed room", ErrEventTooLarge)

// ErrTooSlow ends a stream that held bytes of its Budget while reading
// less than its rate floor (DefaultRateFloor) over a window.
var ErrTooSlow = fmt.Errorf("%w: a partly read event arrived slower than the byte-rate floor", ErrEventTooLarge)

// Budget bounds the bytes that the Readers sharing it hold in partly read
// lines and events, beyond each Reader's allowance. The per-line limit
// alone bounds one stream; many streams of a hostile replica, each just
// under it, add up to gigabytes.
//
// A Budget made by NewBudget is a root; Part returns a share of it for one
// party (a replica's client). A Reader of a part over its fair share
// (the root's total over the parts holding bytes) never takes room from
// another part: when the root is full, a part under its fair share takes
// the room back from the part most over its own, whose largest stream is
// cut (ErrBudgetReclaimed). A Reader over its share never waits for bytes
// to free up: it fails its stream at once, since waiting would keep its
// own bytes held meanwhile.
//
// Every Reader holding bytes past its allowance must also read at the
// rate floor (SetRateFloor), or its stream is cut (ErrTooSlow).
type Budget struct {
	free  atomic.Int64 // root: bytes not held
	total int64
	root  *Budget      // a part's root; nil for a root
	held  atomic.Int64 // a part: bytes its Readers hold

	// floor is the rate floor in bytes per second over window (root's;
	// floor <= 0: none).
	floor  int64
	window time.Duration

	mu    sync.Mutex                   // a root's: guards parts
	parts map[*Budget]map[*account]int // a root's: the parts with Readers, and those Readers
}

// NewBudget returns a root Budget of total bytes with the default rate
// floor; total <= 0 returns nil, which Readers take as no limit.
func NewBudget(total int64) *Budget {
	if total <= 0 {
		return nil
	}
	b := &Budget{total: total, floor: DefaultRateFloor, window: DefaultRateWindow, parts: map[*Budget]map[*account]int{}}
	b.free.Store(total)
	return b
}

// SetRateFloor sets a root's byte-rate floor (bytes per second over each
// window); floor <= 0 turns it off. Set it before the Budget is used.
func (b *Budget) SetRateFloor(floor int64, window time.Duration) {
	if b != nil && b.root == nil {
		b.floor, b.window = floor, window
	}
}

// Part returns a share of b for one party, e.g. the streams of one
// replica. Parts of a nil Budget are nil; a part's part is a part of the
// same root.
func (b *Budget) Part() *Budget {
	if b == nil {
		return nil
	}
	return &Budget{total: b.Total(), root: b.rootOf()}
}

// Root is the Budget a part shares (a root: itself; nil: nil).
func (b *Budget) Root() *Budget {
	if b == nil {
		return nil
	}
	return b.rootOf()
}

func (b *Budget) rootOf() *Budget {
	if b.root != nil {
		return b.root
	}
	return b
}

// Total is the Budget's size in bytes (a part's: its root's).
func (b *Budget) Total() int64 {
	if b == nil {
		return 0
	}
	return b.total
}

// Held is how many bytes the Readers hold of it now (a part: its own
// Readers).
func (b *Budget) Held() int64 {
	if b == nil {
		return 0
	}
	if b.root != nil {
		return b.held.Load()
	}
	return b.total - b.free.Load()
}

// Take reserves n bytes and reports whether they were free; it never
// waits. A nil Budget always grants. A part under its fair share may cut
// the streams of the part most over its own to make room.
func (b *Budget) Take(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	if b.root == nil {
		return b.takeFree(n)
	}
	if b.root.takeFree(n) || b.root.reclaim(b, n) {
		b.held.Add(n)
		return true
	}
	return false
}

// Give returns n bytes taken before.
func (b *Budget) Give(n int64) {
	if b == nil || n <= 0 {
		return
	}
	if b.root != nil {
		b.held.Add(-n)
		b.root.free.Add(n)
		return
	}
	b.free.Add(n)
}

func (b *Budget) takeFree(n int64) bool {
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

// reclaim makes room for n bytes of part p in the full root b, and takes
// them: when p would stay within its fair share (the total over the parts
// with Readers, p included), the part holding the most past its own share
// has its largest streams cut until the room is free. It reports whether
// the bytes were taken.
func (b *Budget) reclaim(p *Budget, n int64) bool {
	b.mu.Lock()
	active := len(b.parts)
	if _, ok := b.parts[p]; !ok {
		active++
	}
	fair := b.total / int64(max(active, 1))
	var victim *Budget
	for q := range b.parts {
		if q != p && q.held.Load() > fair && (victim == nil || q.held.Load() > victim.held.Load()) {
			victim = q
		}
	}
	var accts []*account
	if p.held.Load()+n <= fair && victim != nil {
		for a := range b.parts[victim] {
			accts = append(accts, a)
		}
	}
	b.mu.Unlock()
	slices.SortFunc(accts, func(x, y *account) int { return cmp.Compare(y.held(), x.held()) })
	for _, a := range accts {
		if b.takeFree(n) {
			return true
		}
		if a.held() == 0 {
			break // the rest hold nothing: cutting them frees nothing
		}
		a.cut(ErrBudgetReclaimed)
	}
	return b.takeFree(n)
}

// register adds a Reader's account to its part; unregister removes it.
func (b *Budget) register(a *account) {
	r := b.root
	r.mu.Lock()
	if r.parts[b] == nil {
		r.parts[b] = map[*account]int{}
	}
	r.parts[b][a] = 0
	r.mu.Unlock()
}

func (b *Budget) unregister(a *account) {
	r := b.root
	r.mu.Lock()
	if m := r.parts[b]; m != nil {
		delete(m, a)
		if len(m) == 0 {
			delete(r.parts, b)
		}
	}
	r.mu.Unlock()
}

// account is what a Reader has taken from its Budget. It lives apart from
// the Reader so that a Reader dropped without Release gives its bytes
// back when it is collected (runtime.AddCleanup must not reach the Reader).
// A reclaim or the rate floor may cut it from another goroutine: it then
// gives its bytes back at once and closes the stream's body, which ends
// the Reader's read; the Reader reports the cause.
type account struct {
	budget *Budget
	body   io.Closer    // the stream, closed by a cut; nil: not closable
	read   atomic.Int64 // bytes read from the stream (for the rate floor)

	mu       sync.Mutex // guards the fields below; never held across Take or a Close
	charged  int64
	cause    error // non-nil once cut
	released bool
	timer    *time.Timer // the rate floor's, while charged > 0
	lastRead int64       // read at the timer's last look
}

func (a *account) held() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.charged
}

// err is why the account was cut, nil if it was not.
func (a *account) err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cause
}

// set charges the account with over bytes in all: it takes the growth
// from the Budget (without holding a.mu, so that a reclaim can cut
// accounts of other parts meanwhile) or gives the shrink back.
func (a *account) set(over int64) error {
	a.mu.Lock()
	if a.cause != nil {
		a.mu.Unlock()
		if over == 0 {
			return nil
		}
		return a.cause
	}
	delta := over - a.charged
	if delta <= 0 {
		a.charged = over
		if over == 0 && a.timer != nil {
			a.timer.Stop()
			a.timer = nil
		}
		a.mu.Unlock()
		a.budget.Give(-delta)
		return nil
	}
	a.mu.Unlock()
	if !a.budget.Take(delta) {
		return ErrBudgetExhausted
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cause != nil || a.released { // cut (or released) meanwhile: what it took goes back
		a.budget.Give(delta)
		return cmp.Or(a.cause, ErrBudgetExhausted)
	}
	a.charged = over
	if root := a.budget.rootOf(); a.timer == nil && root.floor > 0 && root.window > 0 {
		a.lastRead = a.read.Load()
		a.timer = time.AfterFunc(root.window, a.checkRate)
	}
	return nil
}

// checkRate is the rate floor's timer: a stream still holding bytes that
// read less than the floor over the window is cut.
func (a *account) checkRate() {
	root := a.budget.rootOf()
	a.mu.Lock()
	if a.cause != nil || a.released || a.charged == 0 || a.timer == nil {
		a.mu.Unlock()
		return
	}
	n := a.read.Load()
	slow := n-a.lastRead < int64(float64(root.floor)*root.window.Seconds())
	a.lastRead = n
	if !slow {
		a.timer.Reset(root.window)
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	a.cut(ErrTooSlow)
}

// cut ends the account's stream for cause: its bytes go back to the
// Budget now, and its body is closed so that the Reader's read ends.
func (a *account) cut(cause error) {
	a.mu.Lock()
	if a.cause != nil || a.released {
		a.mu.Unlock()
		return
	}
	a.cause = cause
	n := a.charged
	a.charged = 0
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.mu.Unlock()
	a.budget.Give(n)
	if a.body != nil {
		go a.body.Close() // the Reader's goroutine may be in Read: no lock, no wait here
	}
}

// refund gives back everything and unregisters the account (Release, or
// the Reader's cleanup).
func (a *account) refund() {
	a.mu.Lock()
	n := a.charged
	a.charged = 0
	a.released = true
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.mu.Unlock()
	a.budget.Give(n)
	if a.budget.root != nil {
		a.budget.unregister(a)
	}
}

// countingReader counts the bytes read for the rate floor.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}
