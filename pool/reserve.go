package pool

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// ErrUnknownReplica is the error for a replica name the pool does not
// have: never had, or removed by a reload. A caller pinned there (a
// session's replica) moves to another.
var ErrUnknownReplica = errors.New("pool: unknown replica")

// ReserveOptions says where [Pool.Reserve] may take a slot.
type ReserveOptions struct {
	// Replica, when set, is the only replica the slot may be on (the
	// caller's session is bound there): no failover to another one.
	Replica string
	// Exclude names replicas the slot must not be on (they refused the
	// call, or serve another app). Ignored when Replica is set.
	Exclude []string
	// Endpoint names the call in the pool's events (a failover). Routing
	// weighs every endpoint: the pool does not see the events of calls
	// sent under a slot, so it keeps no per-endpoint times for them.
	Endpoint string
	// Watch, when set, follows the wait for the slot (see QueueWatch).
	Watch *QueueWatch
}

// Slot is one call's share of a replica's capacity, for callers that speak
// the Gradio protocol to the replica themselves (the gateway's Gradio front
// door). It holds one of the replica's MaxConnections places until
// released; it is never a sticky user's session.
//
// Report the join's outcome with Done: it keeps the replica's refusal and
// call counts (and so its ejection) right. Every outcome but
// gradio.JoinAccepted also frees the slot; an accepted call keeps it until
// Release, once the call has ended.
type Slot struct {
	l        *Lease
	endpoint string
	reported atomic.Bool
	granted  time.Time   // when the slot was taken
	accepted atomic.Bool // its join was accepted: its hold time is measured at Release
	// load follows the accepted call in the replica's per-endpoint
	// figures (capacity.go), fed by Observe; nil before the join was
	// accepted and after Release.
	load atomic.Pointer[callLoad]
}

// Reserve takes a slot for one call of user ("" anonymous) and refreshes
// the user's assignment to its replica. Routing is Acquire's (the user's
// replica, round robin for new users, expected time or least loaded for
// anonymous ones, failover past replicas that cannot serve) within opts.
//
// Errors: ctx's error; ErrClosed; an error for an opts.Replica the pool
// does not have; *ReplicaError (that replica ejected, its queue time-out,
// a connect failure); *AllReplicasFailedError when no replica could serve.
func (p *Pool) Reserve(ctx context.Context, user string, opts ReserveOptions) (*Slot, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	p.init()
	ctx = withQueueWatch(ctx, opts.Watch)
	key := p.users.hash(user)
	if opts.Replica == "" {
		skip := map[*replica]bool{}
		for _, n := range opts.Exclude {
			if r := p.set.Load().byName[n]; r != nil {
				skip[r] = true
			}
		}
		// The replica loop of every acquire (failover.go), with a plain lease.
		l, err := p.acquire(ctx, acquireOpts{key: key, exclude: skip, plain: true})
		if err != nil {
			return nil, err
		}
		l.route = routeOf(ctx)
		return &Slot{l: l, endpoint: opts.Endpoint, granted: time.Now()}, nil
	}
	r := p.set.Load().byName[opts.Replica]
	if r == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownReplica, opts.Replica)
	}
	if ok, probe, cause := r.admit(time.Now()); !ok {
		return nil, &ReplicaError{Replica: r.name, Err: cause}
	} else if probe {
		if err := r.probe(ctx); err != nil {
			return nil, &ReplicaError{Replica: r.name, Err: err}
		}
	}
	l, err := p.plainLease(ctx, r, key, PriorityNormal)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ReplicaError{Replica: r.name, Err: err}
	}
	if key != "" {
		p.pin(ctx, key, r, r, "")
	}
	l.route = routeOf(ctx)
	return &Slot{l: l, endpoint: opts.Endpoint, granted: time.Now()}, nil
}

// Replica returns the name of the slot's replica.
func (s *Slot) Replica() string { return s.l.r.name }

// App returns the replica's app to send the call with (a session of its
// own: see Lease.Client). It must not be used after the slot is freed.
func (s *Slot) App() *gradio.Client { return s.l.client }

// Done reports how the join sent under the slot ended (see
// gradio.ClassifyJoin; err is the join's error, nil when accepted):
//
//   - gradio.JoinAccepted: the replica served (its refusal count is
//     cleared); the slot stays held until Release.
//   - gradio.JoinNotAccepted: the replica refused (a full queue excepted,
//     this counts towards its ejection after Config.EjectAfterRefusals in
//     a row) and the call may move: a failover is counted. The slot is
//     freed.
//   - gradio.JoinCallerFault, gradio.JoinMaybeAccepted: nothing is held
//     against the replica. The slot is freed.
//
// Only the first report counts.
func (s *Slot) Done(outcome gradio.JoinOutcome, err error) {
	if s.reported.Swap(true) {
		return
	}
	l := s.l
	switch outcome {
	case gradio.JoinAccepted:
		s.load.Store(l.r.beginCall(slotEndpoint(l.client, s.endpoint)))
		s.accepted.Store(true)
		l.r.calls.Add(1)
		l.r.served(l.p.now())
		return
	case gradio.JoinNotAccepted:
		if !errors.Is(err, gradio.ErrQueueFull) {
			l.r.refused(err)
		}
		l.r.errs.Add(1)
		l.p.failover(l.r, s.endpoint, l.route, err)
	}
	l.Release()
}

// Release frees the slot: after the accepted call ended, or when no join
// was sent under it. Calling it again does nothing. An accepted call's
// hold time feeds the ETA shown to callers waiting for a slot
// (QueuePosition).
func (s *Slot) Release() {
	if s.accepted.Swap(false) {
		s.l.r.slotTime.add(time.Since(s.granted))
	}
	if load := s.load.Swap(nil); load != nil {
		load.end() // ended by its final message already, unless none came
	}
	s.l.Release()
}

// Observe feeds one message of the accepted call's queue/data stream (the
// JSON of one SSE data line, as relayed) to the replica's per-endpoint
// figures: its queue, run time, effective concurrency and the
// concurrency_limited warning, exactly as the pool's own calls feed them
// (see gradio.LoadEvent for the messages read; the others are ignored).
// Call it for each message of the call until Release; before the join was
// accepted, or after Release, it does nothing.
func (s *Slot) Observe(data []byte) {
	load := s.load.Load()
	if load == nil {
		return
	}
	if ev, ok := gradio.LoadEvent(data); ok {
		load.observe(ev)
	}
}

// slotEndpoint names a slot's endpoint as the pool's own calls name theirs
// (the api_name): the front door names its calls "fn_index=N".
func slotEndpoint(app *gradio.Client, endpoint string) string {
	if n, ok := strings.CutPrefix(endpoint, "fn_index="); ok && app != nil {
		if d, err := app.Config().Endpoint(gradio.FnIndex(atoiOr(n, -1))); err == nil && d.APIName != "" {
			return d.APIName
		}
	}
	return normEndpoint(endpoint)
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// App returns the connected app of the named replica, connecting it first
// if needed. It is the pool's own client: do not Close it; its URL,
// NewRequest and Do reach the app.
func (p *Pool) App(ctx context.Context, replica string) (*gradio.Client, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	r := p.set.Load().find(replica)
	if r == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownReplica, replica)
	}
	p.init()
	app, _, err := r.getApp(ctx)
	if err != nil {
		return nil, &ReplicaError{Replica: r.name, Err: err}
	}
	return app, nil
}

// ConnectedApp returns the named replica's app when it is connected now,
// else nil; unlike App it never connects (callers use it to re-check a
// replica cheaply).
func (p *Pool) ConnectedApp(replica string) *gradio.Client {
	r := p.set.Load().find(replica)
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.app
}
