package sessionpool

import (
	"log/slog"
	"time"
)

// Session is one acquisition of a pooled session: the handle Acquire
// returns. Give it back with exactly one of Release or Destroy; both are
// harmless when called again (a second call does nothing), so
// `defer s.Release()` may follow an early Release or Destroy. A Session must
// not be used after that: each Acquire returns a fresh handle, so a stale
// handle never touches the session's next holder.
type Session[T any] struct {
	it *item[T] // nil once released; touched only by the holder
}

// item states.
const (
	stateIdle uint8 = iota
	stateInUse
	stateChecking
)

// handleBatch is how many Session handles an item allocates at once, so
// that Acquire does not allocate (one batch serves that many acquisitions).
const handleBatch = 64

// item is one pooled session, live from a successful Connect until Close.
// Its fields are guarded by the pool's mu, except value and id (immutable)
// and handles (used only by whoever holds the item: the pool under mu).
type item[T any] struct {
	pool     *Pool[T]
	value    T
	id       uint64
	gen      uint64 // pool.resetGen when connected; a Reset makes the item stale
	created  int64  // pool clock (ns since pool.epoch) at creation
	expires  int64  // pool clock when MaxLifetime retires it; 0: never
	lastUsed int64  // pool clock at the last release (creation before that); checks don't touch it
	failures int    // consecutive failed health checks
	renewing bool   // its replacement is connecting (see renew.go); cleared on release
	state    uint8
	handles  []Session[T]
}

// handle returns a fresh Session for it.
// WARNING: caller must hold p.mu (or otherwise own it exclusively).
func (it *item[T]) handle() *Session[T] {
	if len(it.handles) == 0 {
		it.handles = make([]Session[T], handleBatch)
	}
	s := &it.handles[0]
	it.handles = it.handles[1:]
	s.it = it
	return s
}

// Value returns the session. It panics after Release or Destroy.
func (s *Session[T]) Value() T {
	if s.it == nil {
		panic("sessionpool: Value called on a released Session")
	}
	return s.it.value
}

// ID is a number unique within the pool, also found in Event.SessionID; it
// is stable across acquisitions of the same underlying session. 0 after
// Release or Destroy.
func (s *Session[T]) ID() uint64 {
	if s.it == nil {
		return 0
	}
	return s.it.id
}

// CreatedAt is when the underlying session was connected. Zero after
// Release or Destroy.
func (s *Session[T]) CreatedAt() time.Time {
	if s.it == nil {
		return time.Time{}
	}
	return s.it.pool.epoch.Add(time.Duration(s.it.created))
}

// LogValue logs the session's id only: the value may hold credentials.
func (s *Session[T]) LogValue() slog.Value {
	return slog.GroupValue(slog.Uint64("id", s.ID()))
}

// Release gives the session back to the pool: to the oldest waiter at once
// if there is one, else to the idle set. A session of a closed or reset
// pool, or one older than MaxLifetime, is destroyed instead.
func (s *Session[T]) Release() {
	it := s.it
	if it == nil {
		return
	}
	s.it = nil
	it.pool.release(it)
}

// Destroy closes the session instead of reusing it: call it when a call on
// the session failed in a way that shows the session itself is broken (a
// passive health check; e.g. the connection was lost). The pool replaces it
// in the background when below MinSessions or when callers are waiting.
func (s *Session[T]) Destroy() {
	it := s.it
	if it == nil {
		return
	}
	s.it = nil
	it.pool.destroyInUse(it)
}
