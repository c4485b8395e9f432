package frontdoor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

// bindLock serialises the joins of one caller session that need its
// binding (its first join, calls to endpoints with gr.State: they must
// run where the session's state is, and follow it if it moves), in
// arrival order. A join waiting for it is shown its place (its
// QueueWatch): behind the join holding the lock, wherever that one waits,
// and behind the session's joins that came before it.
type bindLock struct {
	mu      sync.Mutex
	held    bool
	holder  *joinWatch // the holder's watch, nil if none
	waiters []*bindWaiter
}

type bindWaiter struct {
	ready chan struct{} // closed when the lock is handed to it
	watch *joinWatch
}

// errBindWait is a join that waited queue_timeout for the session's
// earlier joins to get their slots.
type errBindWait struct{ waited time.Duration }

func (e *errBindWait) Error() string {
	return fmt.Sprintf("waited %s for the session's earlier calls to get their replica", e.waited.Round(time.Millisecond))
}

func (e *errBindWait) Unwrap() error { return pool.ErrQueueTimeout }

// lock takes l, waiting (in arrival order) up to timeout (<= 0: no
// bound) while another join of the session holds it; watch, if not nil,
// is shown the wait. Errors: ctx's, or one wrapping pool.ErrQueueTimeout.
func (l *bindLock) lock(ctx context.Context, watch *joinWatch, timeout time.Duration) error {
	l.mu.Lock()
	if !l.held {
		l.held, l.holder = true, watch
		l.mu.Unlock()
		return nil
	}
	bw := &bindWaiter{ready: make(chan struct{}), watch: watch}
	l.waiters = append(l.waiters, bw)
	l.mu.Unlock()
	if watch != nil {
		watch.queued(func() pool.QueuePosition { return l.position(bw) })
		defer watch.left()
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	var err error
	select {
	case <-bw.ready:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
		err = &errBindWait{waited: timeout}
	}
	l.mu.Lock()
	if i := slices.Index(l.waiters, bw); i >= 0 {
		l.waiters = slices.Delete(l.waiters, i, i+1)
		l.mu.Unlock()
		return err
	}
	l.mu.Unlock()
	l.unlock() // it was handed the lock meanwhile: pass it on
	return err
}

// unlock hands l to the join that waited longest, if any.
func (l *bindLock) unlock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiters) == 0 {
		l.held, l.holder = false, nil
		return
	}
	next := l.waiters[0]
	l.waiters = slices.Delete(l.waiters, 0, 1)
	l.holder = next.watch
	close(next.ready)
}

// position is where waiter bw is: behind the holder (at its place in the
// queue it waits in, if it waits: its rank and everyone ahead of it) and
// the session's joins ahead of bw. The queue's size counts the holder's
// queue and the session's waiting joins. The ETA scales the holder's.
func (l *bindLock) position(bw *bindWaiter) pool.QueuePosition {
	l.mu.Lock()
	i := slices.Index(l.waiters, bw)
	holder, n := l.holder, len(l.waiters)
	l.mu.Unlock()
	if i < 0 {
		return pool.QueuePosition{Rank: 0, Size: 1} // being handed the lock
	}
	var hp pool.QueuePosition
	ok := false
	if holder != nil {
		hp, ok = holder.Position()
	}
	if !ok {
		// The holder has its slot (it is forwarding its join) or shows
		// nothing: only the session's joins are ahead.
		return pool.QueuePosition{Rank: i, Size: n}
	}
	ahead := max(hp.Rank, 0) + 1
	pos := pool.QueuePosition{Replica: hp.Replica, Rank: ahead + i, Size: max(hp.Size, ahead) + n}
	if hp.ETAKnown {
		pos.ETA, pos.ETAKnown = hp.ETA*time.Duration(pos.Rank+1)/time.Duration(ahead), true
	}
	return pos
}
