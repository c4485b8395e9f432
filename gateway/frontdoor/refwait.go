package frontdoor

// Joins that come before any replica is connected (a gateway's first
// joins, while the replicas' /config is slow) wait for the app to be
// known: which generation it is (relayed or bridged) and whether it has
// the function. One that has waited firstReplicaGrace is answered with
// the gateway's event id, as a join waiting for a slot is, and shown its
// place among those joins (by arrival; no ETA: nothing is measured
// before a replica connected). A join the app then refuses for its input
// (an unknown fn_index) ends on the caller's stream as process_completed
// with success false and the gateway's message, not as a 4xx to its
// join; within the grace (replicas that connect at once, the usual case)
// the caller gets the app's answer to its join, as before.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

// firstReplicaGrace is how long a join waits for the first replica to
// connect before it is answered and shown its wait: the reference app's
// choice itself waits up to adoptGrace for slower replicas once one has
// connected, so a join is told it waits only when no replica connects
// quickly.
const firstReplicaGrace = adoptGrace

// refWaiters are the joins waiting for the reference app, in arrival
// order.
type refWaiters struct {
	mu   sync.Mutex
	list []*refWaiter
}

type refWaiter struct{ watch *joinWatch }

// errNoReplicaYet is a join that waited the pool's queue_timeout for the
// first replica to connect.
var errNoReplicaYet = errors.New("no replica connected within queue_timeout")

// awaitReference waits until the reference app is known (or no replica
// could connect: the join then meets that error where it takes its slot),
// showing watch its place among the joins waiting too once it has waited
// firstReplicaGrace. Like a wait for a slot it is bounded by the pool's
// queue_timeout (errNoReplicaYet); ctx's error when ctx ends.
func (f *FrontDoor) awaitReference(ctx context.Context, watch *joinWatch) error {
	if f.hasReference() {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	go func() {
		defer close(ready)
		_, _, _ = f.reference(ctx)
	}()
	// Not waited for once cancelled: the choice in flight may be another
	// caller's; this one's wait for it ends with ctx.
	defer cancel()
	var expired <-chan time.Time
	if qt := f.p.QueueTimeout(); qt > 0 {
		t := time.NewTimer(qt)
		defer t.Stop()
		expired = t.C
	}
	if watch != nil {
		q := &f.refWait
		me := &refWaiter{watch: watch}
		q.mu.Lock()
		q.list = append(q.list, me)
		q.mu.Unlock()
		defer func() {
			q.mu.Lock()
			if i := slices.Index(q.list, me); i >= 0 {
				q.list = slices.Delete(q.list, i, i+1)
			}
			q.mu.Unlock()
		}()
		t := time.NewTimer(firstReplicaGrace)
		defer t.Stop()
		select {
		case <-ready:
			return ctx.Err()
		case <-expired:
			return errNoReplicaYet
		case <-t.C:
		}
		watch.queued(func() pool.QueuePosition {
			q.mu.Lock()
			defer q.mu.Unlock()
			return pool.QueuePosition{Rank: max(slices.Index(q.list, me), 0), Size: len(q.list)}
		}, false)
		defer watch.left() // before the entry goes: its position is not asked after
	}
	select {
	case <-ready:
		return ctx.Err()
	case <-expired:
		return errNoReplicaYet
	}
}

// startedStream is a response whose event stream was started already:
// the stream's handler starting it again must not send the header twice.
type startedStream struct{ http.ResponseWriter }

func (startedStream) WriteHeader(int) {}

func (s startedStream) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// streamUntilReference serves the caller's queue/data stream while calls
// of s wait for the first replica to connect, which decides how the
// stream is served (bridged or relayed): it writes their estimations (and
// the end of those that got no replica) and Gradio's heartbeat. It
// returns the response to go on with (wrapped, and started set, when it
// started the stream), and done when the stream is over (the caller went
// away, or no call of s is left).
func (f *FrontDoor) streamUntilReference(w http.ResponseWriter, r *http.Request, s *callerSession) (_ http.ResponseWriter, started, done bool) {
	if f.hasReference() || !s.waitingQueued() {
		return w, false, false
	}
	defer s.stream(true)()
	ctx, cancel := context.WithCancel(r.Context())
	ready := make(chan struct{})
	go func() {
		defer close(ready)
		_, _, _ = f.reference(ctx)
	}()
	defer cancel() // not waited for: see awaitReference
	rc := startSSE(w)
	hb := time.NewTicker(f.conf().HeartbeatInterval)
	defer hb.Stop()
	for {
		for _, m := range s.takeQueuedNotes() {
			_ = rc.Data(m)
		}
		if s.closeIfDrained() {
			_ = rc.Data(closeStream)
			s.closed(r.Context())
			return w, true, true
		}
		select {
		case <-ready:
			return startedStream{w}, true, false
		case <-r.Context().Done():
			s.cancelQueued() // Gradio drops a session's calls when its stream closes
			return w, true, true
		case <-s.wake:
		case <-hb.C:
			_ = rc.Data([]byte(`{"msg":"heartbeat"}`))
		}
	}
}
