package pool

// Failover, in one place. The rules (a failed replica is skipped until it
// recovers, and a call a replica may have accepted is never run twice):
//
//   - Connecting a replica's app: a transport failure (*gradio.ConnectError)
//     is retried Config.ConnectRetries times with a growing delay; a metadata
//     or Space error is not retried. The final failure ejects the replica.
//   - Ejection: an ejected replica is skipped for a back-off that grows with
//     each consecutive ejection (defaultEjectBase doubling up to
//     defaultEjectMax); then a few trial calls decide (half-open). Only a
//     served call resets the count; see "Outlier detection" below and the
//     background prober (probe.go).
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
	"iter"
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
	r.connecting, r.connectSince = true, time.Now()
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
		app, err = gradio.Connect(ctx, r.src, p.clientOptions()...)
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

// Outlier detection, like Envoy's:
//
//   - fails counts the replica's ejections in a row. Each ejection lasts
//     ejectBase doubled per earlier one, up to ejectMax (1 s, 2 s, 4 s, ...
//     1 min). Only a call the replica served resets it (served): a probe (a
//     connect, a ping) shows that the app answers, not that it runs calls,
//     so a replica that answers its config but refuses every join stays
//     ejected for ever longer instead of flapping.
//   - When the back-off is over the replica is half-open: halfOpenTrials
//     calls at a time pass as a trial (another round after trialWindow if
//     none has a verdict yet). The first one served makes it ready; one
//     refused ejects it again at once, for twice as long.
//   - An ejection for a failed connect or transport (unreachable) ends
//     when a probe connects again (the background prober, probe.go, every
//     ProbeInterval, or the first caller after the back-off): the fault was
//     the connection, and a connect shows it is gone. The replica is then
//     ready on probation: its count stays, and one refused call ejects it
//     again, for twice as long.
//   - A permanent connect failure (no such Space, a token refused) is
//     ejected for ejectMax at once: retried slowly, shown as permanent.

// halfOpenTrials is how many trial calls a half-open replica lets through
// at a time.
const halfOpenTrials = 2

// admit says whether the replica may take a call now. After an ejection's
// back-off, a caller that finds the app not connected (or unreachable)
// probes it first (probe == true); the others wait for the trial's verdict.
func (r *replica) admit(now time.Time) (ok, probe bool, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.removed:
		// Before closed: a drained replica is closed too, and its caller
		// must see the reconfiguration (and route again, see acquire),
		// not an error that reads as the Pool closed.
		return false, false, errRemoved
	case r.closed:
		return false, false, ErrClosed
	case r.held() != nil: // an operator's drain or disable (control.go)
		return false, false, r.held()
	case r.parked.Load():
		return false, false, ErrParked
	case r.suspect:
		return false, false, &ejectedError{suspectSince: r.suspectAt, last: r.lastErr}
	case !r.ejectUntil.IsZero() && now.Before(r.ejectUntil):
		return false, false, r.ejectedLocked()
	case !r.ejectUntil.IsZero():
		r.ejectUntil, r.halfOpen, r.trials = time.Time{}, true, 0
	}
	if !r.halfOpen {
		return true, false, nil
	}
	if r.probing {
		return false, false, &ejectedError{last: r.lastErr, trial: true}
	}
	if now.Sub(r.trialAt) >= r.p.cfg.trialWindow {
		r.trials = 0 // the last round had no verdict in time: another one
	}
	if r.trials >= halfOpenTrials {
		return false, false, &ejectedError{last: r.lastErr, trial: true}
	}
	r.trials++
	r.trialAt = now
	if r.unreachable || r.app == nil {
		r.probing = true
		return true, true, nil
	}
	return true, false, nil
}

// sidelined returns why the replica takes no new call now (suspect, or
// ejected and its back-off not over), or nil; unlike admit it changes
// nothing.
func (r *replica) sidelined(now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.suspect:
		return &ejectedError{suspectSince: r.suspectAt, last: r.lastErr}
	case !r.ejectUntil.IsZero() && now.Before(r.ejectUntil):
		return r.ejectedLocked()
	}
	return r.movesWaiters() // disabled by an operator (control.go)
}

func (r *replica) ejectedLocked() error {
	return &ejectedError{until: r.ejectUntil, last: r.lastErr, permanent: r.permanent}
}

// trialDue reports whether the replica's back-off is over and a trial
// call would be let through now (admit without side effects).
func (r *replica) trialDue(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.suspect || r.probing {
		return false
	}
	if !r.ejectUntil.IsZero() {
		return !now.Before(r.ejectUntil)
	}
	return r.halfOpen && (r.trials < halfOpenTrials || now.Sub(r.trialAt) >= r.p.cfg.trialWindow)
}

// ejectedWithoutApp returns the ejection cause if the replica is ejected
// and its app is not connected (creating a session would need the network).
func (r *replica) ejectedWithoutApp() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.app == nil && (r.probing || (!r.ejectUntil.IsZero() && r.p.now().Before(r.ejectUntil))) {
		return r.ejectedLocked()
	}
	return nil
}

// usable is admit without side effects, for the least-loaded scan.
func (r *replica) usable(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.closed && !r.parked.Load() && !r.probing && !r.suspect && (r.ejectUntil.IsZero() || !now.Before(r.ejectUntil)) && r.held() == nil
}

// connectInFlight reports whether r has no app and its connect is under
// way. A caller routed there waits for that connect, which a replica that
// trickles its /config holds up to the header time-out (issue 20 "Why" 8),
// so routing prefers a connected replica meanwhile: anonymous callers, new
// users (newUserFirst) and moves (order).
func (r *replica) connectInFlight() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.connecting && r.app == nil
}

// connectStalled reports whether r has no app and its connect has been
// under way for after or longer: a new signed-in user, or one moved off a
// failed replica, assigned there would wait for that connect (a trickled
// /config holds it up to the header time-out) and then stay. A connect
// younger than that is the usual start-up one, and new users still spread
// round robin over every replica meanwhile.
func (r *replica) connectStalled(now time.Time, after time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.connecting && r.app == nil && now.Sub(r.connectSince) >= after
}

// anyConnected reports whether a usable replica of list has its app
// connected: then anonymous routing skips replicas whose connect is under
// way. Only then: at a lazy start every replica connects at once and the
// first calls wait for those connects, as before.
// candidates yields the usable replicas of list, round robin from start,
// each with its tier: 1 for a replica whose connect is under way while
// another is connected (see connectInFlight), yielded after every replica
// of tier 0, so that a caller may stop at tier 1 when tier 0 had one.
func candidates(list []*replica, start int, now time.Time) iter.Seq2[int, *replica] {
	return func(yield func(int, *replica) bool) {
		n := len(list)
		tiered := anyConnected(list, now)
		for tier := range 2 {
			for i := range n {
				r := list[(start+i)%n]
				if !r.usable(now) || (tiered && r.connectInFlight()) != (tier == 1) {
					continue
				}
				if !yield(tier, r) {
					return
				}
			}
			if !tiered {
				return
			}
		}
	}
}

func anyConnected(list []*replica, now time.Time) bool {
	for _, r := range list {
		if r.usable(now) && !r.connectInFlight() {
			if app, _ := r.currentApp(); app != nil {
				return true
			}
		}
	}
	return false
}

// ready reports whether the replica can serve a call now to the best of
// our knowledge: connected, not ejected, not hung, and, when it was
// unreachable, connected again since (a back-off that merely ran out
// proves nothing). It is what /readyz adds up.
func (r *replica) ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	// An ejection whose back-off ran out still counts until the prober or
	// a call makes the replica half-open: the answer changes with the
	// state, not with the clock.
	return !r.closed && !r.suspect && r.app != nil && !r.unreachable && r.ejectUntil.IsZero()
}

// probe checks the replica's app: a connect if it is not connected, else
// a Ping. Passing it ends an unreachable ejection (then half-open); it never
// resets the ejection count. Failing it ejects the replica again.
func (r *replica) probe(ctx context.Context) error {
	r.mu.Lock()
	if !r.ejectUntil.IsZero() || r.halfOpen {
		// Shown as probing, and no trial passes meanwhile. A replica in
		// service (a hang check's ping failed) is not marked: callers
		// waiting for its app must not be turned away.
		r.probing = true
	}
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
	r.probePassed()
	return nil
}

func (r *replica) endProbe() {
	r.mu.Lock()
	r.probing = false
	r.mu.Unlock()
}

// probePassed records that the app answered: an unreachable ejection ends
// (ready on probation), a suspect replica is released; the ejection count
// stays.
func (r *replica) probePassed() {
	r.mu.Lock()
	r.probing = false
	now := r.p.now()
	// The probe was the trial of an unreachable replica, of a refusal
	// ejection whose back-off is over, or of a half-open one.
	recovered := r.halfOpen || (!r.ejectUntil.IsZero() && (r.unreachable || !now.Before(r.ejectUntil)))
	released := r.suspect
	if recovered {
		r.ejectUntil, r.halfOpen, r.trials, r.probation = time.Time{}, false, 0, true
	}
	r.unreachable, r.suspect, r.permanent = false, false, false
	r.mu.Unlock()
	if recovered {
		r.p.emit(Event{Kind: EventRecovered, Replica: r.name})
	} else if released {
		r.p.emit(Event{Kind: EventProbePassed, Replica: r.name})
	}
}

// fail records a replica-level failure and ejects the replica for a growing
// back-off (ejectBase doubling up to ejectMax; ejectMax at once for a
// permanent failure).
func (r *replica) fail(err error) {
	if r.parked.Load() {
		return // a parked Space refuses by design: no ejection
	}
	now := r.p.now()
	r.mu.Lock()
	if !r.ejectUntil.IsZero() && now.Before(r.ejectUntil) {
		// Already ejected: calls that were in flight failing too, or the
		// background prober finding it still down, are the same ejection.
		r.lastErr, r.probing = err, false
		r.permanent = permanentFailure(err)
		if unreachableFailure(err) {
			// Ejected for refusals, and now found not to listen at all:
			// the prober's connect ends it, not the back-off.
			r.unreachable = true
		}
		r.mu.Unlock()
		return
	}
	r.fails++
	b := backoff.Backoff{Base: r.p.cfg.ejectBase, Max: r.p.cfg.ejectMax}
	d := b.Delay(r.fails - 1)
	r.permanent = permanentFailure(err)
	if r.permanent {
		d = r.p.cfg.ejectMax
	}
	until := now.Add(d)
	r.ejectUntil, r.failedAt, r.lastErr = until, now, err
	r.probing, r.halfOpen, r.trials, r.probation = false, false, 0, false
	r.unreachable = unreachableFailure(err)
	r.mu.Unlock()
	r.p.emit(Event{Kind: EventEjected, Replica: r.name, Err: err, Until: until})
}

// unreachableFailure: the replica could not be reached or is not running
// (a connect or transport failure, a Space not running), as opposed to an
// app that answers and refuses calls.
func unreachableFailure(err error) bool {
	var (
		conn  *gradio.ConnectError
		lost  *gradio.ConnectionLostError
		space *gradio.SpaceError
		meta  *gradio.MetadataError
	)
	return errors.As(err, &conn) || errors.As(err, &lost) || errors.As(err, &space) || errors.As(err, &meta) ||
		transportFailure(err)
}

// permanentFailure: retrying soon cannot help (no such Space or app, a
// token refused); a person must act.
func permanentFailure(err error) bool {
	var meta *gradio.MetadataError
	return errors.As(err, &meta) && (errors.Is(err, gradio.ErrNotFound) || errors.Is(err, gradio.ErrUnauthorized))
}

// refused records a call the replica refused; Config.EjectAfterRefusals in
// a row eject it (never when that is negative). A half-open replica is
// ejected again by one refused trial.
func (r *replica) refused(err error) {
	if r.parked.Load() {
		return
	}
	r.sawTransportFailure(err)
	limit := r.p.cfg.EjectAfterRefusals
	r.mu.Lock()
	r.callFails++
	eject := limit > 0 && (r.callFails >= limit || r.halfOpen || r.probation)
	if eject {
		r.callFails = 0
	}
	r.mu.Unlock()
	if eject {
		r.fail(err)
	}
}

// served records a call the replica served: its join accepted at joined,
// or a call started then completed. It clears the failure state, unless
// the call began before the last ejection (a slow call finishing says
// nothing about the refusals since). Any served call shows that a suspect
// replica makes progress again.
func (r *replica) served(joined time.Time) {
	r.mu.Lock()
	r.suspect = false
	if joined.Before(r.failedAt) {
		r.mu.Unlock()
		return
	}
	was := !r.ejectUntil.IsZero() || r.halfOpen
	r.fails, r.callFails, r.ejectUntil, r.probing = 0, 0, time.Time{}, false
	r.halfOpen, r.trials, r.unreachable, r.permanent, r.probation = false, 0, false, false, false
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
	// parkUntil bounds the wait for a wake when every replica is parked
	// (set by the first wait, parked.go).
	parkUntil time.Time
	// prio is the class the call waits in for a session or a permit.
	prio Priority
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
			p.emit(Event{Kind: eventAssigned, User: keyPrefix(key), Err: fmt.Errorf("assignment store: %w", err)})
		case ok:
			assigned = p.set.Load().byName[name] // nil if the replica list changed
		default:
			assigned = p.claim(ctx, key)
		}
	}
	// A replica removed by Reconfigure while its caller waited, or found
	// removed when its turn came in an order made from an older list,
	// sends the caller back here: routed again over the new list, each
	// replica tried once (the reroutes are bounded by the removals).
	seen := map[*replica]bool{}
	for reroute := true; reroute; {
		reroute = false
		if assigned != nil && assigned.isRemoved() {
			assigned = nil
		}
		order := p.order(o.endpoint, key, assigned)
		for _, r := range order {
			if o.exclude[r] || seen[r] {
				continue
			}
			seen[r] = true
			ok, probe, cause := r.admit(time.Now())
			if !ok {
				causes = append(causes, &ReplicaError{Replica: r.name, Err: cause})
				if errors.Is(cause, errRemoved) {
					// This order was made from a list a Reconfigure has
					// replaced since (the caller waited on an earlier
					// replica, or was merely descheduled): the rest of it
					// may all be gone while the new list has replicas
					// this call never saw.
					reroute = true
					break
				}
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
				l, err = p.plainLease(ctx, r, key, o.prio)
			} else {
				l, err = p.acquireOn(ctx, r, key, o.prio)
			}
			if err == nil {
				if cause := r.sidelined(time.Now()); cause != nil {
					// Marked hung or ejected while this caller waited for
					// its session: nothing was sent, so the call goes
					// elsewhere like a new one.
					l.Release()
					causes = append(causes, &ReplicaError{Replica: r.name, Err: cause})
					continue
				}
				if key != "" {
					why := "failover" // assigned could not take the call
					if r == order[0] {
						why = "balance" // routing chose another (Config.RebalanceFactor, users coming back)
					}
					p.pin(ctx, key, r, assigned, why)
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
				if !r.isRemoved() {
					return nil, &ReplicaError{Replica: r.name, Err: err}
				}
				causes = append(causes, &ReplicaError{Replica: r.name, Err: errRemoved})
				reroute = true
				break
			}
			// Connect failure (already recorded as a replica failure) or a
			// full waiter list: this replica cannot serve now, try the next.
			causes = append(causes, &ReplicaError{Replica: r.name, Err: err})
			tried()
			*pending, last = move{from: r, route: routeOf(ctx), err: err}, r
		}
	}
	if last != nil {
		last.errs.Add(1) // the call failed: nowhere else to go
	}
	if until, ok := p.waitUnparked(ctx, causes, o.parkUntil); ok {
		o.parkUntil = until
		return p.acquire(ctx, o) // a replica woke: route again
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
// bad arguments, a file too large, the caller's own cancel or deadline,
// its party holding more than its share of the event budget, its reader
// falling behind the app): they would fail on any replica and do not
// count as the replica's errors.
func callerError(err error) bool {
	return gradio.ClassifyJoin(err) == gradio.JoinCallerFault ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, gradio.ErrEventShare) || errors.Is(err, gradio.ErrSlowReader)
}

// sessionLevel reports failures of one session, not of the replica: the
// call may be retried on the same replica with another session.
func sessionLevel(err error) bool {
	return errors.Is(err, gradio.ErrAppChanged) || errors.Is(err, gradio.ErrClosed)
}

// IsOverloaded reports whether err says only that the replicas were busy:
// every cause is a full or timed-out queue (ours or the app's), none a
// failure; a parked replica beside them is neither. A gateway answers it
// 503 with Retry-After rather than 502.
func IsOverloaded(err error) bool {
	var all *AllReplicasFailedError
	if errors.As(err, &all) {
		n := 0
		for _, c := range all.Causes {
			switch {
			case busy(c.Err):
				n++
			case !errors.Is(c.Err, ErrParked):
				return false
			}
		}
		return n > 0
	}
	return busy(err)
}

// busy: a replica refused the call room (a full or timed-out queue).
func busy(err error) bool {
	return errors.Is(err, ErrQueueFull) || errors.Is(err, ErrQueueTimeout) || errors.Is(err, gradio.ErrQueueFull)
}

// clientOptions are the options every replica's app is connected with:
// the caller's, after the pool's one default.
//
// The pool's sessions open no /heartbeat stream (gradio.WithHeartbeat
// false): most of them serve one call (calls are isolated, each on a
// fresh session hash), and a heartbeat would hold a goroutine and an HTTP
// connection for the whole call (about half the memory of a call in
// flight through the library, by the benchmark report) only to tell the
// app when the session ended. Gradio's own REST API (/call) and its Python client run calls
// without it too; the app then keeps a session's gr.State until its own
// state cache evicts it, and runs no unload handlers for it.
func (p *Pool) clientOptions() []gradio.Option {
	return append([]gradio.Option{gradio.WithHeartbeat(false)}, p.cfg.ClientOptions...)
}
