package pool

// Failover, in one place. The rules (a failed replica is skipped until it
// recovers, and a call a replica may have accepted is never run twice):
//
//   - Connecting a replica's app: a transport failure (*gradio.ConnectError)
//     is retried Config.ConnectRetries times with a growing delay; a metadata
//     or Space error is not retried. The final failure ejects the replica.
//   - Ejection: an ejected replica is skipped for a back-off that grows with
//     each consecutive failure (DefaultEjectBase doubling up to
//     DefaultEjectMax); then the first caller probes it (connect or Ping)
//     before it takes traffic again.
//   - Refusals: a replica that refuses Config.EjectAfterRefusals calls in a
//     row (5xx or a transport failure on queue/join) is ejected; a single
//     refusal only moves that call.
//   - Calls: a call moves to another session or replica only when the app
//     provably did not accept it (gradio.ClassifyJoin: JoinNotAccepted);
//     once queue/join answered with an event id, or may have, its failure
//     is reported, never re-run. A join refused for the caller's input
//     (JoinCallerFault) is the caller's error: not moved, not counted.
//   - Routing: acquire walks the replicas in the user's order (pinned,
//     round robin or least loaded; see order) and skips those that cannot
//     serve now; when none can, the caller gets *AllReplicasFailedError
//     naming each replica's cause ([IsOverloaded] tells "only busy" apart).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/backoff"
	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// connectApp connects the app: ConnectRetries retries with back-off for
// transport failures, none for metadata errors. A final failure counts as a
// replica failure (ejection).
func (r *replica) connectApp() error {
	p := r.p
	ctx := p.ctx
	r.mu.Lock()
	r.connecting = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.connecting = false
		r.mu.Unlock()
	}()
	b := backoff.Backoff{Base: p.cfg.connectRetryDelay, Max: 8 * p.cfg.connectRetryDelay, Jitter: 0.2}
	var err error
	for attempt := 0; attempt <= p.cfg.ConnectRetries; attempt++ {
		if attempt > 0 {
			if e := backoff.Sleep(ctx, b.Delay(attempt-1)); e != nil {
				return e
			}
		}
		start := time.Now()
		var app *gradio.Client
		app, err = gradio.Connect(ctx, r.src, p.cfg.ClientOptions...)
		if err == nil {
			r.mu.Lock()
			if r.closed {
				r.mu.Unlock()
				_ = app.Close()
				return ErrClosed
			}
			r.app, r.baseURL = app, app.BaseURL()
			r.gen++
			r.mu.Unlock()
			p.emit(Event{Kind: EventConnected, Replica: r.name, Duration: time.Since(start)})
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		p.emit(Event{Kind: EventConnectFailed, Replica: r.name, Err: err, Attempt: attempt + 1, Duration: time.Since(start)})
		var ce *gradio.ConnectError
		if !errors.As(err, &ce) {
			break // metadata error / Space not running: next replica at once
		}
	}
	r.fail(err)
	r.wakeIfSleeping(err)
	return err
}

// admit says whether the replica may take a call now. After an ejection's
// back-off the first caller becomes the prober (probe == true); others keep
// skipping it until the probe ends.
func (r *replica) admit(now time.Time) (ok, probe bool, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return false, false, ErrClosed
	case r.probing:
		return false, false, &ejectedError{last: r.lastErr}
	case r.ejectUntil.IsZero():
		return true, false, nil
	case now.Before(r.ejectUntil):
		return false, false, &ejectedError{until: r.ejectUntil, last: r.lastErr}
	}
	r.probing = true
	return true, true, nil
}

// ejectedWithoutApp returns the ejection cause if the replica is ejected
// and its app is not connected (creating a session would need the network).
func (r *replica) ejectedWithoutApp() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.app == nil && (r.probing || (!r.ejectUntil.IsZero() && time.Now().Before(r.ejectUntil))) {
		return &ejectedError{until: r.ejectUntil, last: r.lastErr}
	}
	return nil
}

// usable is admit without side effects, for the least-loaded scan.
func (r *replica) usable(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.closed && !r.probing && (r.ejectUntil.IsZero() || !now.Before(r.ejectUntil))
}

// probe checks an ejected replica once before it takes traffic again: a
// connect if the app is not connected, else a Ping.
func (r *replica) probe(ctx context.Context) error {
	r.mu.Lock()
	app := r.app
	r.mu.Unlock()
	var err error
	if app == nil {
		_, _, err = r.getApp(ctx) // connectApp records a failure itself
		if err != nil {
			r.endProbe()
			return err
		}
	} else {
		pctx, cancel := context.WithTimeout(ctx, r.p.cfg.probeTimeout)
		err = app.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				r.endProbe()
				return ctx.Err()
			}
			if errors.Is(err, gradio.ErrAppChanged) {
				r.appChanged(app)
				if _, _, err = r.getApp(ctx); err != nil {
					r.endProbe()
					return err
				}
			} else {
				r.fail(err)
				return err
			}
		}
	}
	r.succeed()
	return nil
}

func (r *replica) endProbe() {
	r.mu.Lock()
	r.probing = false
	r.mu.Unlock()
}

// fail records a replica-level failure and ejects the replica for a growing
// back-off (DefaultEjectBase doubling up to DefaultEjectMax).
func (r *replica) fail(err error) {
	now := time.Now()
	r.mu.Lock()
	r.fails++
	b := backoff.Backoff{Base: r.p.cfg.ejectBase, Max: r.p.cfg.ejectMax}
	until := now.Add(b.Delay(r.fails - 1))
	r.ejectUntil, r.lastErr, r.probing = until, err, false
	r.mu.Unlock()
	r.p.emit(Event{Kind: EventEjected, Replica: r.name, Err: err, Until: until})
}

// refused records a call the replica refused; Config.EjectAfterRefusals in
// a row eject it (never when that is negative).
func (r *replica) refused(err error) {
	limit := r.p.cfg.EjectAfterRefusals
	r.mu.Lock()
	r.callFails++
	eject := limit > 0 && r.callFails >= limit
	if eject {
		r.callFails = 0
	}
	r.mu.Unlock()
	if eject {
		r.fail(err)
	}
}

// succeed clears the failure state after a passed probe or a served call.
func (r *replica) succeed() {
	r.mu.Lock()
	was := !r.ejectUntil.IsZero()
	r.fails, r.callFails, r.ejectUntil, r.probing = 0, 0, time.Time{}, false
	r.mu.Unlock()
	if was {
		r.p.emit(Event{Kind: EventRecovered, Replica: r.name})
	}
}

// move is a failover not counted yet: a call leaving a replica counts as a
// failover only once another replica (or session) is actually tried, so
// that a call with nowhere else to go (one replica, all busy) is a failed
// call, not a failover.
type move struct {
	from     *replica
	endpoint string
	route    string // routeOf the call's context
	err      error
}

// flush counts the pending failover, if any.
func (m *move) flush(p *Pool) {
	if m.from != nil {
		p.failover(m.from, m.endpoint, m.route, m.err)
		m.from = nil
	}
}

// acquireOpts are the parameters of one acquire.
type acquireOpts struct {
	key string // the user's key, "" anonymous
	// endpoint is the call's endpoint, normalised, for expected-time
	// routing; "" weighs every endpoint (a lease for any call).
	endpoint string
	exclude  map[*replica]bool // replicas not to try
	// causes are failures of earlier attempts of the same call, reported
	// if no replica serves.
	causes []*ReplicaError
	// failed, if not nil, is incremented for every replica tried in vain.
	failed *int
	// pending, if not nil, is the failover of an earlier attempt, counted
	// once a replica is tried here.
	pending *move
	// plain takes a plain slot even with StickySessions: the caller (the
	// front door) binds its callers' sessions itself.
	plain bool
}

// acquire routes o.key to a replica not in o.exclude. A call that fails
// here counts as an error of the last replica tried.
func (p *Pool) acquire(ctx context.Context, o acquireOpts) (*Lease, error) {
	key, causes, pending := o.key, o.causes, o.pending
	tried := func() {
		if o.failed != nil {
			*o.failed++
		}
	}
	if pending == nil {
		pending = &move{}
	}
	var last *replica // the last replica tried in vain
	var assigned *replica
	if key != "" {
		sctx, cancel := context.WithTimeout(ctx, storeTimeout)
		name, ok, err := p.store.Get(sctx, key)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			p.emit(Event{Kind: EventAssigned, User: keyPrefix(key), Err: fmt.Errorf("assignment store: %w", err)})
		case ok:
			assigned = p.byName[name] // nil if the replica list changed
		default:
			assigned = p.claim(ctx, key)
		}
	}
	for _, r := range p.order(o.endpoint, key, assigned) {
		if o.exclude[r] {
			continue
		}
		ok, probe, cause := r.admit(time.Now())
		if !ok {
			causes = append(causes, &ReplicaError{Replica: r.name, Err: cause})
			continue
		}
		pending.flush(p)
		if probe {
			if err := r.probe(ctx); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				causes = append(causes, &ReplicaError{Replica: r.name, Err: err})
				tried()
				*pending, last = move{from: r, route: routeOf(ctx), err: err}, r
				continue
			}
		}
		var l *Lease
		var err error
		if o.plain {
			l, err = p.plainLease(ctx, r, key)
		} else {
			l, err = p.acquireOn(ctx, r, key)
		}
		if err == nil {
			if key != "" {
				p.pin(ctx, key, r, assigned)
			}
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, ErrQueueTimeout) {
			r.errs.Add(1) // the call failed here
			return nil, &ReplicaError{Replica: r.name, Err: err}
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, sessionpool.ErrPoolClosed) {
			return nil, &ReplicaError{Replica: r.name, Err: err}
		}
		// Connect failure (already recorded as a replica failure) or a
		// full waiter list: this replica cannot serve now, try the next.
		causes = append(causes, &ReplicaError{Replica: r.name, Err: err})
		tried()
		*pending, last = move{from: r, route: routeOf(ctx), err: err}, r
	}
	if last != nil {
		last.errs.Add(1) // the call failed: nowhere else to go
	}
	return nil, &AllReplicasFailedError{Causes: causes}
}

func (p *Pool) failover(r *replica, endpoint, route string, err error) {
	r.failovers.Add(1)
	p.emit(Event{Kind: EventFailover, Replica: r.name, Endpoint: endpoint, Route: route, Err: err})
}

// classifySubmitError decides what a Submit error means. retry: the app
// provably did not accept the call, so another session or replica may run
// it (gradio.ClassifyJoin, the rule the front door follows too). broken:
// the session's connection is unusable. replicaFault: the replica itself
// failed (counts towards its ejection); never for the caller's own fault.
func classifySubmitError(err error) (retry, broken, replicaFault bool) {
	outcome := gradio.ClassifyJoin(err)
	retry = outcome == gradio.JoinNotAccepted
	var (
		lost  *gradio.ConnectionLostError
		conn  *gradio.ConnectError
		proto *gradio.ProtocolError
		meta  *gradio.MetadataError
		space *gradio.SpaceError
	)
	switch {
	case outcome == gradio.JoinCallerFault:
		return false, false, false
	case errors.Is(err, gradio.ErrMaybeAccepted):
		// The caller's ctx ended while the join was in flight: never
		// re-run; the session still has that join out, so it is not
		// lent again.
		return false, true, false
	case errors.As(err, &lost):
		return retry, true, !lost.Accepted
	case errors.Is(err, gradio.ErrQueueFull):
		return retry, false, false // overloaded, not failing
	case errors.Is(err, gradio.ErrAppChanged), errors.Is(err, gradio.ErrClosed):
		return retry, true, false
	case errors.As(err, &conn):
		return retry, true, true
	case errors.As(err, &proto):
		return retry, false, retry // a refused join counts against the replica
	case errors.As(err, &space), errors.As(err, &meta):
		return retry, false, true // e.g. lazy /info fetch failed before the call
	}
	return false, false, false
}

// callerError reports errors caused by the call itself (unknown endpoint,
// bad arguments, a file too large, the caller's own cancel or deadline):
// they would fail on any replica and do not count as the replica's errors.
func callerError(err error) bool {
	return gradio.ClassifyJoin(err) == gradio.JoinCallerFault ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// sessionLevel reports failures of one session, not of the replica: the
// call may be retried on the same replica with another session.
func sessionLevel(err error) bool {
	return errors.Is(err, gradio.ErrAppChanged) || errors.Is(err, gradio.ErrClosed)
}

// IsOverloaded reports whether err says only that the replicas were busy:
// every cause is a full or timed-out queue (ours or the app's), none a
// failure. A gateway answers it 503 with Retry-After rather than 502.
func IsOverloaded(err error) bool {
	busy := func(e error) bool {
		return errors.Is(e, ErrQueueFull) || errors.Is(e, ErrQueueTimeout) || errors.Is(e, gradio.ErrQueueFull)
	}
	var all *AllReplicasFailedError
	if errors.As(err, &all) {
		if len(all.Causes) == 0 {
			return false
		}
		for _, c := range all.Causes {
			if !busy(c) {
				return false
			}
		}
		return true
	}
	return busy(err)
}
