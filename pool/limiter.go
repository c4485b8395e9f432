package pool

import (
	"context"
)

// Limiter bounds the calls in flight of each replica beyond this Pool, for
// example across several gateway instances (package pool/cluster shares
// each replica's limit through Redis). The Pool takes a permit before it
// lends a session of the replica and releases it with the session, so a
// Limiter sees every call, the waiting included.
//
// Implementations must be safe for concurrent use.
type Limiter interface {
	// Acquire waits for a permit to run one call on replica (by name, see
	// Pool.Replicas), first come first served among this Pool's callers.
	// It returns ctx's error when ctx ends first (the Pool bounds the wait
	// by Config.QueueTimeout), and an error wrapping ErrQueueFull when its
	// waiter list is full (the Pool then tries the next replica). prio is
	// the call's class (CallOptions.Priority), for limiters that serve
	// higher classes first.
	Acquire(ctx context.Context, replica string, prio Priority) (Permit, error)
	// Waiting reports how many callers wait for a permit of replica, for
	// Stats and the least-loaded routing of anonymous users.
	Waiting(replica string) int
}

// Permit is the right to run one call, from [Limiter.Acquire]. Release
// must be safe to call more than once (only the first counts).
type Permit interface {
	Release()
}

// takePermit takes r's permit from Config.Limiter (nil without one),
// waiting at most Config.QueueTimeout like the session queue does.
func (p *Pool) takePermit(ctx context.Context, r *replica, prio Priority) (Permit, error) {
	lim := p.cfg.Limiter
	if lim == nil {
		return nil, nil
	}
	qctx := ctx
	if qt := p.live.Load().queueTimeout; qt > 0 {
		var cancel context.CancelFunc
		qctx, cancel = context.WithTimeout(ctx, qt)
		defer cancel()
	}
	pm, err := lim.Acquire(qctx, r.name, prio)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if qctx.Err() != nil {
			p.emit(Event{Kind: EventQueueTimeout, Replica: r.name})
			return nil, ErrQueueTimeout
		}
		return nil, err
	}
	return pm, nil
}

// limiterWaiting is Limiter.Waiting, 0 without a Limiter.
func (p *Pool) limiterWaiting(r *replica) int {
	if p.cfg.Limiter == nil {
		return 0
	}
	return p.cfg.Limiter.Waiting(r.name)
}

// plainLease takes a permit of Config.Limiter (if any), then a pooled
// session of r: a lease that is only the slot (no sticky reservation).
func (p *Pool) plainLease(ctx context.Context, r *replica, key string, prio Priority) (*Lease, error) {
	ctx = watchOn(ctx, r)
	permit, err := p.takePermit(ctx, r, prio)
	if err != nil {
		return nil, err
	}
	s, err := r.acquireSession(ctx, prio)
	if err != nil {
		if permit != nil {
			permit.Release()
		}
		return nil, err
	}
	// A fresh session hash for this lease alone: Gradio keeps gr.State per
	// session hash, so a pooled session's hash shared by successive callers
	// would let one caller read another's state. The pooled session still
	// supplies what is costly (config, API info, warm HTTP connections).
	return &Lease{p: p, r: r, sess: s, client: s.Value().NewSession(), ownClient: true, key: key, permit: permit}, nil
}
