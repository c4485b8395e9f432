package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// The background prober: every ProbeInterval, whatever the traffic,
//
//   - an unreachable replica (its ejection is for a failed connect or
//     transport) is connected again (probe): when it serves again its
//     ejection ends (half-open), so it takes new calls within one interval
//     instead of waiting for a caller to find it;
//   - a replica ejected for refusals whose back-off is over, or half-open,
//     gets the gateway's own trial (the same probe): when it answers it is
//     ready on probation (one refused call ejects it again, for twice as
//     long), without waiting for a user's call to try it;
//   - a replica whose app is not connected (the start-up check, an app
//     that changed) is connected;
//   - a replica with calls in flight, or suspect, is pinged with
//     HangTimeout: no answer marks it suspect (new calls go elsewhere, the
//     calls it holds keep waiting), an answer clears that.
//
// A permanent failure (no such Space, a token refused) is probed only when
// its ejection ends; a Space asleep never (a request to it would wake it,
// which only a call or Config.WakeSleeping may do). Probes never count as calls and never reset
// the ejection count (failover.go).

// probeLoop runs the prober until the pool closes.
func (p *Pool) probeLoop() {
	p.every(p.cfg.ProbeInterval, func() { p.probeRound(p.now()) })
}

// every runs f every d until the pool closes.
func (p *Pool) every(d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// probeRound starts the probes due now; each replica has at most one
// running (a hung one must not stall the others).
func (p *Pool) probeRound(now time.Time) {
	for _, r := range p.set.Load().list {
		kind := r.probeDue(now)
		if kind == probeNone || !r.checking.CompareAndSwap(false, true) {
			continue
		}
		if !p.goBackground(func() {
			defer r.checking.Store(false)
			switch kind {
			case probeConnect:
				_ = r.probe(p.ctx)
			case probeHang:
				r.hangCheck(p.ctx)
			case probeApp:
				// The connect callers share (singleflight); a failure ejects
				// the replica as for them. No probing mark: callers waiting
				// for the app must not be turned away meanwhile.
				_, _, _ = r.getApp(p.ctx)
			}
		}) {
			r.checking.Store(false)
		}
	}
}

type probeKind int

const (
	probeNone    probeKind = iota
	probeConnect           // connect (or ping) to end an unreachable ejection
	probeHang              // ping with HangTimeout
	probeApp               // not ejected, app not connected: connect it (shared with callers)
)

// probeDue says which probe the replica needs now.
func (r *replica) probeDue(now time.Time) probeKind {
	inUse := r.sp.Stat().InUse
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed || r.probing || r.connecting || r.parked.Load():
		return probeNone
	case !r.ejectUntil.IsZero():
		if asleep(r.lastErr) {
			return probeNone // a request to a sleeping Space wakes it: only a call or WakeSleeping may
		}
		// Along the back-off only, like every other try: a replica that
		// stays unreachable is tried (and logged) ever more rarely, up to
		// once per ejectMax, not every ProbeInterval forever.
		if r.unreachable && !now.Before(r.ejectUntil) {
			return probeConnect
		}
		if !r.unreachable && !now.Before(r.ejectUntil) {
			return probeConnect // the gateway's own trial, not a user's call
		}
		return probeNone
	case r.halfOpen:
		// Half-open by a caller's admit: the prober's trial closes it
		// without waiting for another caller (its pinned users moved).
		return probeConnect
	case r.app == nil:
		if r.p.initialized.Load() || r.p.checkStarted.Load() {
			return probeApp
		}
		return probeNone
	case r.p.cfg.HangTimeout > 0 && (r.suspect || inUse > 0):
		return probeHang
	}
	return probeNone
}

// hangCheck pings the replica's app with HangTimeout: no answer in time
// marks it suspect; an answer clears that; a refused connection ejects it
// (unreachable).
func (r *replica) hangCheck(ctx context.Context) {
	app, _ := r.currentApp()
	if app == nil {
		return
	}
	d := r.p.cfg.HangTimeout
	pctx, cancel := context.WithTimeout(ctx, d)
	err := app.Ping(pctx)
	timedOut := pctx.Err() != nil
	cancel()
	switch {
	case ctx.Err() != nil:
	case timedOut && r.streaming(app, d):
		// Slow to answer (its threads busy: Gradio's max_threads) while
		// its streams deliver: busy, not hung.
	case timedOut:
		r.markSuspect(fmt.Errorf("no answer to a ping within %s: %w", d, errors.Join(err, context.DeadlineExceeded)))
	case err == nil:
		r.probePassed()
	default:
		// The app changed (restarted) or cannot be reached: the connect
		// probe handles both.
		_ = r.probe(ctx)
	}
}

// markSuspect records a replica that left a join or a ping unanswered for
// HangTimeout.
func (r *replica) markSuspect(err error) {
	r.mu.Lock()
	if r.closed || r.suspect {
		r.mu.Unlock()
		return
	}
	r.suspect, r.suspectAt, r.lastErr = true, r.p.now(), err
	r.mu.Unlock()
	r.p.emit(Event{Kind: EventSuspect, Replica: r.name, Err: err})
}

// watchJoin marks the replica suspect if the join it guards is not
// answered within HangTimeout; call the returned stop when it is.
func (r *replica) watchJoin() (stop func()) {
	d := r.p.cfg.HangTimeout
	if d <= 0 {
		return func() {}
	}
	t := time.AfterFunc(d, func() {
		if app, _ := r.currentApp(); app != nil && r.streaming(app, d) {
			return // busy, not hung (see hangCheck)
		}
		r.markSuspect(fmt.Errorf("queue/join unanswered for %s", d))
	})
	return func() { t.Stop() }
}

// streaming reports whether a data stream of app brought a message (a
// heartbeat included) within the last 2×hang: the replica makes progress.
// Twice HangTimeout (20 s by default) spans Gradio's 15 s heartbeat
// period, so a replica whose calls only send heartbeats still counts; a
// frozen one is suspect at most that long after its last message.
func (r *replica) streaming(app *gradio.Client, hang time.Duration) bool {
	last := app.LastMessage()
	return !last.IsZero() && time.Since(last) < 2*hang
}

// CheckReplicas connects every replica's app in the background, without
// initialising the pool or opening sessions (not a call): so that Ready
// can be true before the first call, and a replica that cannot connect is
// reported at start with its cause (EventConnectFailed, then EventEjected;
// a permanent failure is retried slowly). Replicas not connected are
// retried by the background prober.
func (p *Pool) CheckReplicas() {
	if p.closed.Load() || !p.checkStarted.CompareAndSwap(false, true) {
		return
	}
	for _, r := range p.set.Load().list {
		if r.parked.Load() {
			continue
		}
		p.goBackground(func() { _, _, _ = r.getApp(p.ctx) })
	}
}
