package pool

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/internal/waitq"
)

// QueuePosition is a call's place in the queue it waits in for a slot of a
// replica (a session of the replica's pool): what Gradio's estimation
// message tells its callers.
type QueuePosition struct {
	Replica string
	// Rank is the 0-based place in serving order (Gradio's rank); Size
	// the callers waiting there (queue_size).
	Rank, Size int
	// ETA is when the call is expected to get its slot: Rank+1 slot
	// times (the measured time a slot is held, see Slot) over the
	// replica's MaxConnections. Zero with ETAKnown false until a slot
	// call has been measured on some replica (Gradio sends rank_eta null
	// until the function has run once).
	ETA      time.Duration
	ETAKnown bool
	// Waking: every replica is parked (package autoscale) and the call
	// waits for one to wake (Pool.SetWakeWait); Replica is empty, Rank
	// and Size are its place among the calls waiting so, and ETA (known
	// once the autoscaler has woken a Space: Pool.SetWakeETA) the time
	// until that replica is expected to run.
	Waking bool
}

type queueWatcherKey struct{}

// withQueueWatch carries a call's QueueWatch (CallOptions.Watch,
// ReserveOptions.Watch) down to where it waits: the wait queues see only
// a context (waitq.WithWatcher).
func withQueueWatch(ctx context.Context, w *QueueWatch) context.Context {
	if w == nil {
		return ctx
	}
	return context.WithValue(ctx, queueWatcherKey{}, w)
}

// watchOn returns ctx with the waitq.Watcher that reports the waits at r
// to the call's QueueWatcher, ctx itself without one.
func watchOn(ctx context.Context, r *replica) context.Context {
	qw, _ := ctx.Value(queueWatcherKey{}).(*QueueWatch)
	if qw == nil {
		return ctx
	}
	return waitq.WithWatcher(ctx, replicaWatch{qw: qw, r: r})
}

// replicaWatch adds the replica and the ETA to the queue's rank.
type replicaWatch struct {
	qw *QueueWatch
	r  *replica
}

func (w replicaWatch) Queued(pos func() (int, int)) {
	w.qw.queuedAt(func() QueuePosition {
		rank, size := pos()
		eta, known := w.r.queueETA(max(rank, 0))
		return QueuePosition{Replica: w.r.name, Rank: rank, Size: size, ETA: eta, ETAKnown: known}
	})
}

func (w replicaWatch) Left() { w.qw.left() }

// slotTimeWeight is the weight of a new measure in the slot time's
// moving average.
const slotTimeWeight = 0.2

// slotTimes holds the measured time calls held their slot: from the lease
// to the end of a call the app accepted (an accepted Slot's Release; a
// Call's final event, its app's error included).
type slotTimes struct {
	avg atomic.Int64 // nanoseconds, exponentially weighted; 0 none yet
}

func (s *slotTimes) add(d time.Duration) {
	for {
		old := s.avg.Load()
		nv := int64(d)
		if old != 0 {
			nv = old + int64(slotTimeWeight*float64(int64(d)-old))
		}
		if s.avg.CompareAndSwap(old, max(nv, 1)) {
			return
		}
	}
}

// queueETA is when a caller at rank is expected to get a slot of r: rank+1
// slot times over its MaxConnections. The slot time is r's own, else the
// mean of the other replicas' (r has served no slot call yet).
func (r *replica) queueETA(rank int) (time.Duration, bool) {
	avg, ok := r.slotTimeAvg()
	if !ok {
		return 0, false
	}
	slots := max(r.p.live.Load().maxConns, 1)
	return avg * time.Duration(rank+1) / time.Duration(slots), true
}

// slotTimeAvg is the measured time a call holds a slot of r: r's own,
// else the mean of the other replicas' (r has served no slot call yet);
// false when no call was measured anywhere.
func (r *replica) slotTimeAvg() (time.Duration, bool) {
	if avg := time.Duration(r.slotTime.avg.Load()); avg > 0 {
		return avg, true
	}
	var sum time.Duration
	n := 0
	for _, o := range r.p.set.Load().list {
		if a := o.slotTime.avg.Load(); a > 0 {
			sum += time.Duration(a)
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / time.Duration(n), true
}

// QueueWatch follows one call's wait for a slot (CallOptions.Watch,
// ReserveOptions.Watch) and keeps its position for polling: the caller
// shows it (Position) from its own goroutine. The zero value is ready; use
// one per call.
type QueueWatch struct {
	mu     sync.Mutex
	pos    func() QueuePosition
	queued chan struct{} // made on first use (waitedCh)
	closed bool
}

// waitedCh returns the channel Waited gives, made on first use.
func (w *QueueWatch) waitedCh() chan struct{} {
	if w.queued == nil {
		w.queued = make(chan struct{})
	}
	return w.queued
}

// queuedAt records that the call waits; pos gives its position until
// left begins (the waiter is reused after: waitq.Watcher).
func (w *QueueWatch) queuedAt(pos func() QueuePosition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pos = pos
	if !w.closed {
		w.closed = true
		close(w.waitedCh())
	}
}

func (w *QueueWatch) left() {
	w.mu.Lock()
	w.pos = nil
	w.mu.Unlock()
}

// QueueTimeout is the pool's bound on a wait for a slot (Config.QueueTimeout,
// as reconfigured), for waits of its callers outside the pool to follow.
func (p *Pool) QueueTimeout() time.Duration { return p.live.Load().queueTimeout }

// Waited is closed when the call first waits for a slot.
func (w *QueueWatch) Waited() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waitedCh()
}

// Position returns the call's position now; false when it does not wait
// (not yet, or not any more).
func (w *QueueWatch) Position() (QueuePosition, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pos == nil {
		return QueuePosition{}, false
	}
	return w.pos(), true
}
