package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// ErrUnknownReplica is returned for a replica name the pool does not have.
var ErrUnknownReplica = errors.New("pool: unknown replica")

// The functions below serve callers that speak the Gradio protocol
// themselves on a replica's app (the gateway's Gradio front door): they
// choose a replica, hold one of its slots per call in flight, and report
// whether the replica took the call. A Lease from them is never a sticky
// reservation: it is only the slot, so MaxConnections still bounds the
// calls in flight per replica.

// App returns the connected app of the named replica, connecting it first
// if needed. It is the pool's own client: do not Close it; its URL,
// NewRequest and Do reach the app.
func (p *Pool) App(ctx context.Context, replica string) (*gradio.Client, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	r := p.byName[replica]
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

// AcquireOn takes a slot of the named replica for user ("" anonymous) and
// refreshes the user's assignment to it; it never moves to another
// replica. Errors: ErrUnknownReplica, *ReplicaError (ejected, queue
// time-out, connect failure), ctx's error, ErrClosed.
func (p *Pool) AcquireOn(ctx context.Context, replica, user string) (*Lease, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	r := p.byName[replica]
	if r == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownReplica, replica)
	}
	p.init()
	if ok, probe, cause := r.admit(time.Now()); !ok {
		return nil, &ReplicaError{Replica: r.name, Err: cause}
	} else if probe {
		if err := r.probe(ctx); err != nil {
			return nil, &ReplicaError{Replica: r.name, Err: err}
		}
	}
	key := p.users.Key(user)
	l, err := p.plainLease(ctx, r, key)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ReplicaError{Replica: r.name, Err: err}
	}
	if key != "" {
		p.pin(ctx, key, r, r)
	}
	return l, nil
}

// AcquireExcept is Acquire's routing (the user's replica, else round robin
// for new users, least loaded for anonymous ones; failover past replicas
// that cannot serve) that skips the named replicas and takes a plain slot
// even when StickySessions is on.
func (p *Pool) AcquireExcept(ctx context.Context, user string, exclude ...string) (*Lease, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	p.init()
	key := p.users.Key(user)
	skip := map[*replica]bool{}
	for _, n := range exclude {
		if r := p.byName[n]; r != nil {
			skip[r] = true
		}
	}
	// The replica loop of every acquire (failover.go), with a plain lease:
	// the front door binds its callers' sessions itself.
	return p.acquire(ctx, key, skip, nil, nil, nil, true)
}

// Refused reports that the replica refused the call made under this lease
// (a transport failure before the join was sent, a 5xx or a full queue):
// it counts towards the replica's ejection (three in a row), counts a
// failover and ends the lease. endpoint names the call for the event.
func (l *Lease) Refused(endpoint string, err error) {
	if !errors.Is(err, gradio.ErrQueueFull) {
		l.r.refused(err)
	}
	l.r.errs.Add(1)
	l.p.failover(l.r, endpoint, err)
	l.Release()
}

// Accepted reports that the replica accepted a call made under this lease
// (it clears the replica's refusal count). The lease stays held until the
// call ends.
func (l *Lease) Accepted() {
	l.r.calls.Add(1)
	l.r.succeed()
}

// ConnectedApp returns the named replica's app when it is connected now,
// else nil; unlike App it never connects (callers use it to re-check a
// replica cheaply).
func (p *Pool) ConnectedApp(replica string) *gradio.Client {
	r := p.byName[replica]
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.app
}
