package pool

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gradiopool/gradiopool/gradio"
)

// Result is the outcome of [Pool.Predict].
type Result struct {
	Data     []json.RawMessage // one value per output
	Replica  string            // the replica that ran the call
	EventID  string            // the app's event id
	Duration time.Duration     // from the first Acquire to the result
	// Attempts is how many replicas or sessions were tried, the one that
	// served included: more than 1 only when earlier ones could not be
	// reached or provably did not accept the call (Attempts-1 failovers).
	Attempts int
}

// Call is a call submitted with [Pool.Submit]. Its session goes back to the
// pool by itself when the job ends (completed, failed or cancelled).
type Call struct {
	job      *gradio.Job
	lease    *Lease
	replica  string
	attempts int
	waited   time.Duration // in Acquire, over every attempt
	released chan struct{} // closed once the lease is released
	trace    *callTrace    // nil when not traced
	load     *callLoad     // the call's share of its replica's capacity bookkeeping
	granted  time.Time     // when its lease was taken: its hold time feeds QueuePosition.ETA
}

// Replica returns the name of the replica running the call.
func (c *Call) Replica() string { return c.replica }

// Attempts is how many replicas or sessions were tried (see Result).
func (c *Call) Attempts() int { return c.attempts }

// Waited is how long the call waited for a session, over every attempt:
// in the replicas' FIFO queues, or for a session to connect when none was
// warm. It does not include the join.
func (c *Call) Waited() time.Duration { return c.waited }

// Events returns the job's updates (queue position and ETA, progress, logs,
// partial outputs, then Completed or Error); see gradio.Job.Events.
func (c *Call) Events() <-chan gradio.Event { return c.job.Events() }

// Done is closed when the job has finished and its session was released.
func (c *Call) Done() <-chan struct{} { return c.released }

// Wait waits for the job and returns its outputs or error (wrapped in a
// *ReplicaError). ctx bounds only the wait; the Submit context governs the job.
func (c *Call) Wait(ctx context.Context) ([]json.RawMessage, error) {
	data, err := c.job.Wait(ctx)
	if err != nil && ctx.Err() == nil {
		err = &ReplicaError{Replica: c.replica, Err: err}
	}
	return data, err
}

// Release gives back what the call's result holds of the event budget
// (gradio.Job.Release): call it once the result is delivered. Optional: a
// Call dropped without it gives it back when collected.
func (c *Call) Release() { c.job.Release() }

// Predict runs endpoint (api_name, with or without "/") with args for user
// ("" for anonymous) and waits for the result. It acquires a session,
// submits, waits and releases. When ctx ends the app's job is cancelled and
// Predict returns without waiting for that (the session is released once
// it is done).
//
// A call is never run twice: it moves to another session or replica only
// when the replica provably did not accept it (connect failure, queue full,
// a 5xx or a transport error on queue/join before an event id). Once the
// app accepted it, its failure is returned.
func (p *Pool) Predict(ctx context.Context, user, endpoint string, args ...any) (*Result, error) {
	start := time.Now()
	c, err := p.SubmitWith(ctx, user, CallOptions{Quiet: true}, endpoint, args...)
	if err != nil {
		return nil, err
	}
	data, err := c.job.Wait(ctx)
	c.job.Release() // the result is the caller's from here
	// Once ctx has ended, the session comes back when the app's job is
	// cancelled, which a hung replica can delay past ctx's deadline: the
	// answer does not wait for that.
	if ctx.Err() == nil {
		<-c.released
	}
	if err != nil {
		return nil, &ReplicaError{Replica: c.replica, Err: err}
	}
	return &Result{Data: data, Replica: c.replica, EventID: c.job.ID(), Duration: time.Since(start), Attempts: c.attempts}, nil
}

// Submit starts endpoint with args for user and returns once the app
// accepted the call (see Predict for the retry rule). The job's session is
// released when the job ends. ctx governs the whole job: when it ends first
// the app's job is cancelled.
func (p *Pool) Submit(ctx context.Context, user, endpoint string, args ...any) (*Call, error) {
	return p.SubmitWith(ctx, user, CallOptions{}, endpoint, args...)
}

// CallOptions are the per-call options of [Pool.SubmitWith]. The zero
// value is Submit's behaviour.
type CallOptions struct {
	// Priority is the class the call waits in when its replica has no
	// free session (and for a Config.Limiter's permit).
	Priority Priority
	// Watch, when set, follows the call's waits for a slot: its place in
	// the queue, as Gradio shows its own (see QueueWatch).
	Watch *QueueWatch
	// Party is the caller the call's event streams are charged to inside
	// its replica's part of the event budget (gradio.Client.SetEventParty):
	// the calls of one party, on every replica, share a fair share of the
	// whole budget, and a stream cut because its party ran parallel
	// streams and held more than that share (gradio.ErrEventShare) is the
	// caller's error, not the replica's.
	// Default: the user ("" anonymous: each call is a party of its own).
	Party string
	// Quiet: the call's Events will not be read (it is waited for, as
	// Predict does), so its job keeps none (gradio.SubmitOptions.Quiet).
	Quiet bool
}

// SubmitWith is Submit with per-call options. They are a parameter rather
// than context values so that they apply to this call only, not to
// whatever else runs under the same context.
func (p *Pool) SubmitWith(ctx context.Context, user string, opts CallOptions, endpoint string, args ...any) (*Call, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	p.init()
	if err := p.unknownEndpoint(endpoint); err != nil {
		return nil, err
	}
	ctx, ct := p.startCall(withQueueWatch(ctx, opts.Watch), endpoint)
	key := p.users.hash(user)
	party := opts.Party
	if party == "" && key != "" {
		party = "user:" + key
	}
	start := time.Now()
	exclude := map[*replica]bool{}
	var causes []*ReplicaError
	// Every attempt either excludes a replica or (session-level failures)
	// retries the same one; the bound keeps a flapping app from looping.
	maxAttempts := 2*len(p.set.Load().list) + 1
	failed := 0 // replicas or sessions tried in vain
	var waited time.Duration
	var pending move // the last attempt's failover, counted once another is tried
	for attempt := 1; ; attempt++ {
		t0 := time.Now()
		span := ct.child(spanAcquire, attrAttempt.Int(attempt))
		actx := ctx
		if span != nil {
			actx = trace.ContextWithSpan(ctx, span) // the connect span's parent
		}
		l, err := p.acquire(actx, acquireOpts{key: key, endpoint: normEndpoint(endpoint), exclude: exclude,
			causes: causes, failed: &failed, pending: &pending, prio: opts.Priority})
		waited += time.Since(t0)
		if err != nil {
			endSpan(span, err)
			ct.end("", failed+1, err)
			return nil, err
		}
		r := l.r
		granted := time.Now()
		l.route = routeOf(ctx)
		if span != nil {
			span.SetAttributes(attrReplica.String(r.name))
		}
		endSpan(span, nil)
		r.calls.Add(1)
		span = ct.child(spanJoin, attrReplica.String(r.name), attrAttempt.Int(attempt))
		if _, err := l.client.Config().Endpoint(endpoint); err != nil {
			// Unknown to this replica's app (none was connected at the
			// check above): nothing is recorded under the name.
			l.Release()
			ct.end(r.name, failed+1, err)
			return nil, err
		}
		l.client.SetEventParty(party)
		load := r.beginCall(endpoint)
		stopWatch := r.watchJoin()
		// No outputs history: a Call has no Outputs, and a generator's
		// partial outputs would all stay live until the call ends.
		job, err := l.client.SubmitWith(ctx, gradio.SubmitOptions{Hook: jobHook(load, ct), NoOutputs: true, Quiet: opts.Quiet}, endpoint, args...)
		stopWatch()
		endSpan(span, err)
		if err == nil {
			r.served(t0)
			c := &Call{job: job, lease: l, replica: r.name, attempts: failed + 1, waited: waited, released: make(chan struct{}), trace: ct, load: load, granted: granted}
			ct.joined()
			p.releaseWhenDone(c, endpoint, start)
			return c, nil
		}
		load.end()
		if !callerError(err) {
			r.errs.Add(1)
		}
		r.sawTransportFailure(err)
		retry, broken, replicaFault := classifySubmitError(err)
		if errors.Is(err, gradio.ErrAppChanged) {
			r.appChanged(l.client)
		}
		if errors.Is(err, gradio.ErrMaybeAccepted) {
			l.closeOwnClientLater()
		}
		if broken {
			l.MarkBroken()
		} else {
			l.Release()
		}
		if ctx.Err() != nil || !retry || attempt >= maxAttempts {
			p.emit(Event{Kind: EventCallDone, Replica: r.name, User: keyPrefix(key), Endpoint: endpoint, Route: routeOf(ctx), Err: err, Duration: time.Since(start)})
			ct.end(r.name, failed+1, cmp.Or(ctx.Err(), err))
			if errors.Is(err, gradio.ErrMaybeAccepted) {
				return nil, &ReplicaError{Replica: r.name, Err: err}
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if len(causes) > 0 && retry {
				return nil, &AllReplicasFailedError{Causes: append(causes, &ReplicaError{Replica: r.name, Err: err})}
			}
			return nil, &ReplicaError{Replica: r.name, Err: err}
		}
		if replicaFault {
			r.refused(err)
		}
		causes = append(causes, &ReplicaError{Replica: r.name, Err: err})
		failed++
		if !sessionLevel(err) {
			exclude[r] = true
		}
		ct.failover(r.name, err)
		pending = move{from: r, endpoint: endpoint, route: routeOf(ctx), err: err}
	}
}

// releaseWhenDone releases c's lease when its job ends: a callback the job
// starts when it finishes (gradio.Job.AfterDone), so that no goroutine is
// parked per call in flight. Not goBackground: a running job must outlive
// nothing but itself. The job always finishes (completion, failure, its
// Submit ctx ending, or the session closing), so the callback always runs.
func (p *Pool) releaseWhenDone(c *Call, endpoint string, start time.Time) {
	c.job.AfterDone(func() {
		c.load.end() // ended by the final event already, unless the app never sent one
		// The job's own outcome (its final event), not Wait's: a result
		// whose room in the event budget was taken back since is the
		// caller's loss, not the replica's.
		err := c.job.Status().Err
		var lost *gradio.ConnectionLostError
		if errors.As(err, &lost) || errors.Is(err, gradio.ErrClosed) {
			c.lease.MarkBroken()
			if !errors.Is(err, gradio.ErrEventShare) { // the caller's fault: the replica is not suspect
				c.lease.r.sawTransportFailure(err)
			}
		} else {
			c.lease.Release()
		}
		r := c.lease.r
		var appErr *gradio.AppError
		if err == nil || errors.As(err, &appErr) {
			r.slotTime.add(time.Since(c.granted)) // a call run to its end: what a waiter waits for
		}
		switch {
		case err == nil:
			r.served(start)
		case errors.As(err, &appErr):
			// The app's own answer (gr.Error, or an exception in the
			// function): the replica worked, so it is counted apart.
			r.appErrs.Add(1)
		case !callerError(err) && !errors.Is(err, gradio.ErrCanceled):
			r.errs.Add(1)
		}
		p.emit(Event{Kind: EventCallDone, Replica: r.name, User: keyPrefix(c.lease.keyForEvents()), Endpoint: endpoint, Route: c.lease.route, Err: err, Duration: time.Since(start)})
		c.trace.end(r.name, c.attempts, err)
		close(c.released)
	})
}

// unknownEndpoint is the error of a call to an endpoint that no connected
// replica's app has (gradio.ErrUnknownEndpoint), nil when one has it or
// none is connected yet. Such a call takes no session, assigns no user
// and records nothing under its name: a flood of made-up names would
// otherwise grow the per-endpoint tables (capacity, stats) without bound
// and every later call's cost with them.
func (p *Pool) unknownEndpoint(endpoint string) error {
	var first error
	for _, r := range p.set.Load().list {
		app, _ := r.currentApp()
		if app == nil {
			continue
		}
		_, err := app.Config().Endpoint(endpoint)
		if err == nil {
			return nil
		}
		first = cmp.Or(first, err)
	}
	return first
}
