package frontdoor

import (
	"sync"

	"github.com/gradiopool/gradiopool/pool"
)

// joinWatch is where a join waits, shown to its caller (queued.go): in the
// pool's queues (its pool.QueueWatch, handed to Reserve) or in the front
// door's own (the first replica, refwait.go). Its zero value is not ready: use newJoinWatch.
type joinWatch struct {
	pool pool.QueueWatch

	mu     sync.Mutex
	pos    func() pool.QueuePosition // the front door's own wait; nil: none now
	shown  bool
	waited chan struct{} // closed at the first own wait
	// reader: the first own wait was for the caller's stream (a bridged
	// call, holding its slot already), not for a slot or a replica.
	reader bool
}

func newJoinWatch() *joinWatch { return &joinWatch{waited: make(chan struct{})} }

// poolWatch is the watch to hand to the pool; nil for a nil w.
func (w *joinWatch) poolWatch() *pool.QueueWatch {
	if w == nil {
		return nil
	}
	return &w.pool
}

// queued records that the join waits in the front door, pos giving its
// position until left; reader: the wait is for the caller's data stream.
func (w *joinWatch) queued(pos func() pool.QueuePosition, reader bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pos = pos
	if !w.shown {
		w.shown, w.reader = true, reader
		close(w.waited)
	}
}

// waitedForReader reports whether the join's first own wait was for its
// caller's stream (queued with reader).
func (w *joinWatch) waitedForReader() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reader
}

// left ends the wait queued began: pos is not called from then on.
func (w *joinWatch) left() {
	w.mu.Lock()
	w.pos = nil
	w.mu.Unlock()
}

// Position is the join's place now: in the front door's wait if it is in
// one, else in the pool's; false when it waits nowhere.
func (w *joinWatch) Position() (pool.QueuePosition, bool) {
	w.mu.Lock()
	if w.pos != nil {
		defer w.mu.Unlock()
		return w.pos(), true
	}
	w.mu.Unlock()
	return w.pool.Position()
}
