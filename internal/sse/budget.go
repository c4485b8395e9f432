package sse

import (
	"cmp"
	"fmt"
	"io"
	"runtime"
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

// ErrPartyOverShare ends, or refuses room to, a stream whose party (a
// caller, see Party) ran two streams or more and held more than its fair
// share of the whole budget (over every replica's part: a caller's
// parallel calls spread over replicas count together), or more than its
// share of its replica's streams and bytes there, or whose Holds (what it
// was sent and has not taken yet) kept more than its streams: the
// caller's own calls took the room, not the replica, so the failure is
// the caller's (a gateway does not count it against the replica). It
// wraps ErrEventTooLarge.
var ErrPartyOverShare = fmt.Errorf("%w: this stream's caller held more than its fair share of the event budget (in parallel streams, or in outputs it had not taken yet)", ErrEventTooLarge)

// ErrTooSlow ends a stream that held bytes of its Budget while reading
// less than its rate floor (DefaultRateFloor) over a window.
var ErrTooSlow = fmt.Errorf("%w: a partly read event arrived slower than the byte-rate floor", ErrEventTooLarge)

// Budget bounds the bytes that the Readers sharing it hold in partly read
// lines and events, beyond each Reader's allowance. The per-line limit
// alone bounds one stream; many streams of a hostile replica, each just
// under it, add up to gigabytes.
//
// A Budget made by NewBudget is a root. Its parts form a tree: Part
// returns a share of a Budget for one party (the root's parts are the
// replicas' clients), Party the share of a named party inside a part (a
// caller of that replica: its streams share it). A Reader on a part that
// is not a named party is a party of its own (one call). A party's fair
// share is its parent's over the parent's parties holding Readers (the
// root's: its total).
//
// A named party's name is its caller's across parts: the parties of one
// name in every replica's part are one caller, whose fair share of the
// whole budget is the total over the callers holding Readers (a Reader
// that is no named party is a caller of its own).
//
// When the root is full, a Reader takes room back first by caller: while
// its caller (with the room it asks) stays within its fair share of the
// whole budget, the caller most over its own, running two streams or
// more, loses its largest streams, on whatever replica they are. Else by
// the tree: its party takes room back at the highest level where it (with
// the room it asks) stays within its fair share while a sibling is over
// its own: the sibling most over its share loses, inside it the party
// whose caller is most over its share of the whole budget, else the party
// most over its share there (down to a leaf), and there the largest
// streams are cut until the room is free. A hostile replica's streams are
// cut for a healthy replica's, a caller's parallel outputs for another
// caller's. A caller over its share takes nothing from one within its
// own. A Reader with nothing to take room from never waits for bytes to
// free up: it fails its own stream at once, since waiting would keep its
// own bytes held meanwhile.
//
// The failure is charged (its error) to the stream's caller
// (ErrPartyOverShare) when the caller runs two streams or more and holds
// more than its fair share of the whole budget (a refused stream counting
// the room it asked; a cut one not counting the bytes of the caller's own
// stream that asked for room), or when it is a named party running two
// streams or more on its replica, and at least as many as the replica's
// parties do on average (a caller alone on its replica included).
// Otherwise it is charged to the replica (ErrBudgetReclaimed for a cut,
// ErrBudgetExhausted for a refusal): a replica that sends every caller
// large events holds its bytes in one stream per caller.
//
// Every Reader holding bytes past its allowance must also read at the
// rate floor (SetRateFloor), or its stream is cut (ErrTooSlow).
type Budget struct {
	free   atomic.Int64 // root: bytes not held
	total  int64
	root   *Budget      // a part's root; nil for a root
	parent *Budget      // a part's parent (the root, or a part)
	key    string       // a named party's name in its parent; "" otherwise
	held   atomic.Int64 // a part: bytes its Readers and its parts' Readers hold

	// floor is the rate floor in bytes per second over window (root's;
	// floor <= 0: none).
	floor  int64
	window time.Duration

	mu sync.Mutex // a root's: guards the tree fields below, of every part

	readers int                   // Readers registered in this part and its parts
	accts   map[*account]struct{} // this part's own Readers
	kids    map[*Budget]struct{}  // the parts of this one with Readers
	named   map[string]*Budget    // its named parties with Readers, by name

	// cutReplica and cutParty count the streams cut or refused for room,
	// charged to a replica or to a party (a root's).
	cutReplica, cutParty atomic.Int64
}

// NewBudget returns a root Budget of total bytes with the default rate
// floor; total <= 0 returns nil, which Readers take as no limit.
func NewBudget(total int64) *Budget {
	if total <= 0 {
		return nil
	}
	b := &Budget{total: total, floor: DefaultRateFloor, window: DefaultRateWindow}
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
// replica; a part's part is a party inside it. Parts of a nil Budget are
// nil. A part takes part in the fair shares only while it has Readers.
func (b *Budget) Part() *Budget {
	if b == nil {
		return nil
	}
	return &Budget{total: b.Total(), root: b.rootOf(), parent: b}
}

// Party returns the part of b for the named party key (e.g. one caller of
// a replica): every Reader given it, or another Party(key) of b asked
// while one of them is registered, shares one part. It holds no state once
// its last Reader is released, so the number of names is bounded by the
// Readers. An empty key (or a nil b) returns b: each Reader is then a
// party of its own.
func (b *Budget) Party(key string) *Budget {
	if b == nil || key == "" {
		return b
	}
	r := b.rootOf()
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := b.named[key]; p != nil {
		return p
	}
	return &Budget{total: b.total, root: r, parent: b, key: key}
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
// Readers and its parts').
func (b *Budget) Held() int64 {
	if b == nil {
		return 0
	}
	if b.root != nil {
		return b.held.Load()
	}
	return b.total - b.free.Load()
}

// Charged reports how many streams a root cut or refused for room (not
// for the rate floor), charged to a replica (ErrBudgetReclaimed,
// ErrBudgetExhausted) or to a party (ErrPartyOverShare).
func (b *Budget) Charged() (replica, party int64) {
	if b == nil {
		return 0, 0
	}
	r := b.rootOf()
	return r.cutReplica.Load(), r.cutParty.Load()
}

// Take reserves n bytes and reports whether they were free; it never
// waits. A nil Budget always grants. A part under its fair share may cut
// the streams of the part most over its own to make room.
func (b *Budget) Take(n int64) bool { return b.take(n) == nil }

// take is Take with the error of a refusal: ErrPartyOverShare when b's
// caller is to blame, else ErrBudgetExhausted.
func (b *Budget) take(n int64) error {
	if b == nil || n <= 0 {
		return nil
	}
	if b.root == nil {
		if b.takeFree(n) {
			return nil
		}
		return ErrBudgetExhausted
	}
	if !b.root.takeFree(n) {
		if err := b.root.reclaim(b, n); err != nil {
			return err
		}
	}
	for q := b; q.root != nil; q = q.parent {
		q.held.Add(n)
	}
	return nil
}

// Give returns n bytes taken before.
func (b *Budget) Give(n int64) {
	if b == nil || n <= 0 {
		return
	}
	if b.root != nil {
		for q := b; q.root != nil; q = q.parent {
			q.held.Add(-n)
		}
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

// mostOver is the part of set, other than not, holding the most past
// share; nil when none is over it.
func mostOver(set map[*Budget]struct{}, share int64, not *Budget) *Budget {
	var v *Budget
	for q := range set {
		if q != not && q.held.Load() > share && (v == nil || q.held.Load() > v.held.Load()) {
			v = q
		}
	}
	return v
}

// localOverLocked reports whether leaf p is a named party running two
// Readers or more in its parent, and at least as many as its parent's
// parties do on average: inside its replica its own parallel streams took
// the room (a caller alone on its replica included). Callers hold the
// root's mu.
func localOverLocked(p *Budget) bool {
	par := p.parent
	return p.key != "" && par != nil && p.readers >= 2 && p.readers*len(par.kids) >= par.readers
}

// caller is one caller's holdings over the whole budget: a named party's
// leaves in every part (every replica) it reads in, or a leaf that is a
// party of its own.
type caller struct {
	held    int64
	readers int
	leaves  []*Budget
}

// callers is a root's callers while it reclaims: named parties by name,
// over every part; each leaf that is not a named party is a caller of its
// own, counted in anon. Gathered from the tree under the root's mu, only
// when the budget is full: the tree keeps no state for it.
type callers struct {
	named map[string]*caller
	anon  int
}

func (b *Budget) callersLocked() callers {
	cs := callers{named: map[string]*caller{}}
	var walk func(q *Budget)
	walk = func(q *Budget) {
		for k := range q.kids {
			switch {
			case k.key != "":
				c := cs.named[k.key]
				if c == nil {
					c = &caller{}
					cs.named[k.key] = c
				}
				c.held += k.held.Load()
				c.readers += k.readers
				c.leaves = append(c.leaves, k)
			case len(k.kids) > 0:
				walk(k)
			default:
				cs.anon++
			}
		}
	}
	walk(b)
	return cs
}

// of is leaf p's caller.
func (cs callers) of(p *Budget) *caller {
	if c := cs.named[p.key]; p.key != "" && c != nil {
		return c
	}
	return &caller{held: p.held.Load(), readers: p.readers, leaves: []*Budget{p}}
}

// share is a caller's fair share of the root b: its total over its
// callers.
func (cs callers) share(b *Budget) int64 {
	return b.total / int64(max(len(cs.named)+cs.anon, 1))
}

// over reports whether c, running two streams or more, holds more than
// share with extra bytes (the room it asks for, or minus the bytes of the
// stream asking for it).
func (c *caller) over(share, extra int64) bool {
	return c.readers >= 2 && c.held+extra > share
}

// sameCaller reports whether leaves p and q belong to one caller.
func sameCaller(p, q *Budget) bool { return p == q || p.key != "" && p.key == q.key }

// refusedLocked is the error p's stream is refused room with, cs the
// root's callers now:
// ErrPartyOverShare when its caller, with the n bytes asked, would hold
// more than its fair share of the whole budget while running two streams
// or more (wherever they are), or runs more than its share of streams
// inside its replica (localOverLocked), or when its consumers keep more
// of the budget than its streams read (keepsMoreLocked), else
// ErrBudgetExhausted (the replica's). Callers hold the root's mu.
func (b *Budget) refusedLocked(cs callers, p *Budget, n int64) error {
	c := cs.of(p)
	if localOverLocked(p) || c.over(cs.share(b), n) || c.keepsMoreLocked() {
		return ErrPartyOverShare
	}
	return ErrBudgetExhausted
}

// keepsMoreLocked reports whether the caller's Holds (outputs it has not
// taken yet: undelivered results, a slow reader's backlog) keep more of
// the budget than its streams hold of events being read: then the caller
// filled its room by not taking what it was sent, not its replica by
// sending it. Callers hold the root's mu.
func (c *caller) keepsMoreLocked() bool {
	var kept, charged int64
	for _, leaf := range c.leaves {
		for a := range leaf.accts {
			a.mu.Lock()
			kept, charged = kept+a.kept, charged+a.charged
			a.mu.Unlock()
		}
	}
	return kept > charged
}

// charge counts one stream cut or refused for room with err.
func (b *Budget) charge(err error) {
	if err == ErrPartyOverShare {
		b.cutParty.Add(1)
	} else {
		b.cutReplica.Add(1)
	}
}

// reclaim makes room for n bytes of leaf p in the full root b, and takes
// them (from the root's free bytes; the caller counts them in p).
//
// First by caller, over the whole budget: while p's caller (with n more)
// stays within its fair share, the caller most over its own, running two
// streams or more, loses its largest streams wherever they are
// (ErrPartyOverShare).
//
// Else by the tree: from the top of p's path down, at the first level
// where p's ancestor (with n more) stays within its fair share while a
// sibling is over its own, the sibling most over it loses; inside it, at
// each level, the party whose caller is most over its share of the whole
// budget (p's own first when p's caller is over it), else the party most
// over its share there, else the one holding the most, down to a leaf
// whose largest streams are cut until the room is free. A caller over its
// share takes no room from a caller within its own. The cut is the
// caller's (ErrPartyOverShare) when it is over its share of the whole
// budget (not counting p's bytes when it is p's), over its share of
// streams inside its replica (localOverLocked), or keeps more in Holds
// than its streams read (keepsMoreLocked), else the replica's
// (ErrBudgetReclaimed). With no victim p's own stream is refused
// (refusedLocked).
func (b *Budget) reclaim(p *Budget, n int64) error {
	b.mu.Lock()
	cs := b.callersLocked()
	cshare := cs.share(b)
	mine := cs.of(p)
	greedy := mine.over(cshare, n)
	// overOf is how much the caller of leaf q holds when it is over its
	// share of the whole budget (-1: it is not), p's bytes not counted.
	overOf := func(q *Budget) int64 {
		if q.key == "" && len(q.kids) > 0 {
			return -1 // not a leaf
		}
		c, extra := cs.of(q), int64(0)
		if sameCaller(p, q) {
			extra = -p.held.Load()
		}
		if !c.over(cshare, extra) {
			return -1
		}
		return c.held
	}

	var leaves []*Budget
	var cause error
	if !greedy {
		var v *caller
		for key, c := range cs.named {
			if key != p.key && c.over(cshare, 0) && (v == nil || c.held > v.held) {
				v = c
			}
		}
		if v != nil {
			leaves, cause = v.leaves, ErrPartyOverShare
		}
	}
	if leaves == nil {
		if victim := b.treeVictimLocked(p, n, greedy, overOf); victim != nil {
			switch {
			case greedy && !sameCaller(p, victim) && overOf(victim) < 0:
				// p's caller, over its share, takes nothing from a caller within its own
			case localOverLocked(victim) || overOf(victim) >= 0 || cs.of(victim).keepsMoreLocked():
				leaves, cause = []*Budget{victim}, ErrPartyOverShare
			default:
				leaves, cause = []*Budget{victim}, ErrBudgetReclaimed
			}
		}
	}
	if leaves == nil {
		err := b.refusedLocked(cs, p, n) // nothing changed since cs was gathered
		b.mu.Unlock()
		b.charge(err)
		return err
	}
	var accts []*account
	for _, l := range leaves {
		for a := range l.accts {
			accts = append(accts, a)
		}
	}
	b.mu.Unlock()
	slices.SortFunc(accts, func(x, y *account) int { return cmp.Compare(y.held(), x.held()) })
	for _, a := range accts {
		if b.takeFree(n) {
			return nil
		}
		if a.held() == 0 {
			break // the rest hold nothing: cutting them frees nothing
		}
		if a.cut(cause) {
			b.charge(cause)
		}
	}
	if b.takeFree(n) {
		return nil
	}
	b.mu.Lock()
	err := b.refusedLocked(b.callersLocked(), p, n) // the streams changed while they were cut
	b.mu.Unlock()
	b.charge(err)
	return err
}

// treeVictimLocked is the leaf whose streams the tree gives up for n
// bytes of leaf p (see reclaim), nil when none. greedy: p's caller is
// over its share of the whole budget; overOf: what a leaf's caller holds
// when over its share (else -1). Callers hold the root's mu.
func (b *Budget) treeVictimLocked(p *Budget, n int64, greedy bool, overOf func(*Budget) int64) *Budget {
	var path []*Budget
	for q := p; q != b; q = q.parent {
		path = append(path, q)
	}
	slices.Reverse(path)
	share := b.total
	var victim *Budget
	for _, q := range path {
		k := len(q.parent.kids)
		if _, ok := q.parent.kids[q]; !ok {
			k++
		}
		share /= int64(max(k, 1))
		if q.held.Load()+n <= share {
			if victim = mostOver(q.parent.kids, share, q); victim != nil {
				break
			}
		}
	}
	if victim == nil {
		return nil
	}
	for len(victim.kids) > 0 {
		share /= int64(len(victim.kids))
		var next *Budget
		for q := range victim.kids {
			if greedy && sameCaller(p, q) {
				next = q
				break
			}
			if o := overOf(q); o >= 0 && (next == nil || o > overOf(next)) {
				next = q
			}
		}
		if next == nil {
			next = mostOver(victim.kids, share, nil)
		}
		if next == nil {
			for q := range victim.kids {
				if next == nil || q.held.Load() > next.held.Load() {
					next = q
				}
			}
		}
		victim = next
	}
	return victim
}

// register adds a Reader's account to part b and returns the part it is
// counted in: a named party's canonical part (the one Party returns while
// it has Readers), else a leaf of its own under b (the Reader is a party
// of its own).
func (b *Budget) register(a *account) *Budget {
	r := b.root
	r.mu.Lock()
	defer r.mu.Unlock()
	leaf := b
	if b.key != "" {
		if p := b.parent.named[b.key]; p != nil {
			leaf = p
		} else {
			if b.parent.named == nil {
				b.parent.named = map[string]*Budget{}
			}
			b.parent.named[b.key] = b
		}
	} else {
		leaf = &Budget{total: b.total, root: r, parent: b}
	}
	if leaf.accts == nil {
		leaf.accts = map[*account]struct{}{}
	}
	leaf.accts[a] = struct{}{}
	for q := leaf; q.root != nil; q = q.parent {
		q.readers++
		if q.parent.kids == nil {
			q.parent.kids = map[*Budget]struct{}{}
		}
		q.parent.kids[q] = struct{}{}
	}
	return leaf
}

// unregister removes a Reader's account from its leaf; parts left without
// Readers leave the tree.
func (b *Budget) unregister(a *account) {
	r := b.root
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := b.accts[a]; !ok {
		return
	}
	delete(b.accts, a)
	for q := b; q.root != nil; q = q.parent {
		q.readers--
		if q.readers == 0 {
			delete(q.parent.kids, q)
			if q.key != "" && q.parent.named[q.key] == q {
				delete(q.parent.named, q.key)
			}
		}
	}
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

	mu       sync.Mutex  // guards the fields below; never held across Take or a Close
	charged  int64       // the Reader's bytes past its allowance
	kept     int64       // the bytes of its Holds not released (see Reader.Hold)
	holds    int         // its Holds not released: the account stays registered
	cause    error       // non-nil once cut
	released bool        // the Reader was released
	timer    *time.Timer // the rate floor's, while charged > 0
	lastRead int64       // read at the timer's last look
}

func (a *account) held() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.charged + a.kept
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
	if err := a.budget.take(delta); err != nil {
		return err
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
// Budget now, and its body is closed so that the Reader's read ends. It
// reports whether it cut (false: cut, or released with no Hold out,
// before).
func (a *account) cut(cause error) bool {
	a.mu.Lock()
	if a.cause != nil || a.released && a.holds == 0 {
		a.mu.Unlock()
		return false
	}
	a.cause = cause
	n := a.charged + a.kept
	a.charged, a.kept = 0, 0
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.mu.Unlock()
	a.budget.Give(n)
	if a.body != nil {
		go a.body.Close() // the Reader's goroutine may be in Read: no lock, no wait here
	}
	return true
}

// refund gives back the Reader's bytes (Release, or the Reader's
// cleanup) and unregisters the account, once its Holds are released too.
func (a *account) refund() {
	a.mu.Lock()
	n := a.charged
	a.charged = 0
	a.released = true
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	last := a.holds == 0
	a.mu.Unlock()
	a.budget.Give(n)
	if last && a.budget.root != nil {
		a.budget.unregister(a)
	}
}

// Hold is what a consumer of a Reader's event keeps of it once the Reader
// has handed it over (a decoded output on its way to its caller), charged
// to the Reader's account: the same party, the same fair shares, until
// Release (see Reader.Hold). A nil Hold holds nothing.
// A Hold dropped without Release gives its bytes back when it is
// collected.
type Hold struct {
	s       *holdState
	cleanup runtime.Cleanup
}

// holdState lives apart from its Hold, for the Hold's cleanup.
type holdState struct {
	acct *account
	n    int64
	done atomic.Bool
}

// Release gives the Hold's bytes back (none if its stream was cut since:
// the cut gave them back). Safe to call more than once, and on nil.
func (h *Hold) Release() {
	if h == nil {
		return
	}
	h.cleanup.Stop()
	h.s.release()
}

func (h *holdState) release() {
	if !h.done.CompareAndSwap(false, true) {
		return
	}
	a := h.acct
	a.mu.Lock()
	var n int64
	if a.cause == nil {
		n = h.n
		a.kept -= n
	}
	a.holds--
	last := a.released && a.holds == 0
	a.mu.Unlock()
	a.budget.Give(n)
	if last && a.budget.root != nil {
		a.budget.unregister(a)
	}
}

// Err is the cause of the cut that took the Hold's bytes back
// (ErrPartyOverShare, ErrBudgetReclaimed, ...), nil while they are
// counted: a consumer given one should drop what it holds, and fail its
// call with it, as for a stream cut while it read.
func (h *Hold) Err() error {
	if h == nil || h.s.done.Load() {
		return nil
	}
	return h.s.acct.err()
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
