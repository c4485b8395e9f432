package pool

import (
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/gradiopool/gradiopool/gradio"
)

// Liveness: every LivenessInterval each connected replica in service gets
// a TCP connect to its host (gradio.Client.Reach), whatever the traffic.
// Nothing else notices a replica that died while idle: the prober pings
// only replicas with calls in flight, and the health check runs every
// five minutes. A connect that fails is a transport failure, recorded as
// every other one (fail: unreachable), so the prober connects the replica
// again within one ProbeInterval of it listening again.
//
// The same check runs at once whenever a call, a join or a health check
// sees a transport failure (transportFailure), so that a replica that died
// is classified by one rule however it was seen to die: a join "not sent:
// connection refused" ejects it as unreachable like a failed connect does,
// instead of counting as a refusal of a replica that answers.

// livenessLoop runs the liveness checks until the pool closes.
func (p *Pool) livenessLoop() {
	p.every(p.cfg.LivenessInterval, func() {
		for _, r := range p.set.Load().list {
			r.checkLiveness()
		}
	})
}

// checkLiveness starts a liveness check of the replica in the background
// when it is in service and no other check of it is running.
func (r *replica) checkLiveness() {
	if r.p.cfg.LivenessInterval <= 0 || r.reachUnsupported.Load() || !r.livenessDue() || !r.checking.CompareAndSwap(false, true) {
		return
	}
	if !r.p.goBackground(func() {
		defer r.checking.Store(false)
		r.reach(r.p.ctx)
	}) {
		r.checking.Store(false)
	}
}

// livenessDue: connected and in service (an ejected, suspect or probed
// replica has the prober's attention already; a parked one is asleep on
// purpose: a state, not a failure).
func (r *replica) livenessDue() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.app != nil && !r.closed && !r.suspect && !r.probing && !r.connecting && r.ejectUntil.IsZero() && !r.parked.Load()
}

// reach connects to the replica's host; a failure ejects it as
// unreachable.
func (r *replica) reach(ctx context.Context) {
	app, gen := r.currentApp()
	if app == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, livenessTimeout)
	err := app.Reach(rctx)
	cancel()
	switch {
	case err == nil, ctx.Err() != nil:
		return
	case errors.Is(err, errors.ErrUnsupported):
		// Behind a proxy or a custom transport: the check cannot see the
		// replica; the prober and the health check remain.
		r.reachUnsupported.Store(true)
		return
	}
	if _, now := r.currentApp(); now != gen {
		return // connected again meanwhile: the failure is old news
	}
	r.fail(err)
}

// transportFailure reports whether err says the replica could not be
// reached at all: a failed connect (refused, reset, no route, time-out)
// rather than an answer. It is the one rule for every path that sees a
// replica die (connect, join, stream, health check); the liveness check
// then decides.
func transportFailure(err error) bool {
	if err == nil {
		return false
	}
	var conn *gradio.ConnectError
	if errors.As(err, &conn) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// sawTransportFailure is called by every path that saw err on the
// replica: a transport failure, or a connection lost mid-call, starts a liveness check now, whose verdict
// ejects the replica as unreachable if it does not listen.
func (r *replica) sawTransportFailure(err error) {
	var lost *gradio.ConnectionLostError
	if transportFailure(err) || errors.As(err, &lost) {
		r.checkLiveness()
	}
}
