package pool

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// Replica states shown in Stats.
const (
	stateNew        = "new"        // not connected yet (lazy)
	stateConnecting = "connecting" // first connect in flight
	StateReady      = "ready"      // app connected, taking traffic
	StateEjected    = "ejected"    // failed recently: skipped until its back-off ends (or, unreachable, until a probe connects)
	stateProbing    = "probing"    // back-off over: a probe is checking it
	stateHalfOpen   = "half-open"  // back-off over: a few trial calls pass; the first served one makes it ready
	stateSuspect    = "suspect"    // hung: it left a join or a ping unanswered for HangTimeout; new calls go elsewhere
	stateClosed     = "closed"
)

// replica is one Gradio app: its connected app (the factory of sessions,
// fetched once and shared), its session pool and its health state.
type replica struct {
	p    *Pool
	name string
	src  string // as configured: Space id or URL
	sp   *sessionpool.Pool[*gradio.Client]

	connect singleflight.Group // one connect of the app at a time

	mu sync.Mutex // guards the fields below; never held during I/O
	// app is the connected app whose NewSession makes pooled sessions; nil
	// until connected, and again after the app restarted.
	app        *gradio.Client
	gen        uint64 // bumped on every successful connect
	baseURL    string
	connecting bool
	// connectSince is when the connect under way (connecting) began.
	connectSince time.Time
	// Outlier detection (failover.go).
	fails      int       // consecutive ejections; only a served call resets it
	callFails  int       // consecutive refused calls since the last success
	ejectUntil time.Time // zero: not ejected
	failedAt   time.Time // when the last ejection began
	// unreachable: the ejection is for a failed connect or transport, so a
	// probe that connects again ends it early (the fault is gone); an
	// ejection for refused calls ends only with its back-off, since a probe
	// cannot show that calls are served.
	unreachable bool
	permanent   bool      // the last connect failure is permanent (no such Space, 401): retried slowly
	halfOpen    bool      // back-off over, no call served since: trial calls only
	probation   bool      // connected again after being unreachable, no call served since: one refusal ejects
	trials      int       // trial calls let through in this half-open round
	trialAt     time.Time // when the last one was
	probing     bool      // a probe is in flight
	suspect     bool      // hung (probe.go): no new calls until it answers again
	suspectAt   time.Time
	lastErr     error
	closed      bool
	// removed: Reconfigure took it out of the replica list; its calls in
	// flight finish (its app stays connected for them), new ones go
	// elsewhere, and drain closes it when the last one ended.
	removed bool

	calls, errs, failovers atomic.Uint64
	appErrs                atomic.Uint64 // calls the app answered with an error (gr.Error): not the replica's failure
	stickyTimeouts         atomic.Uint64 // sticky users who gave up waiting for their own session
	stickyWaiting          atomic.Int32  // sticky users waiting for their own session

	cap      capacity    // the Space's queues as reported, and our calls there
	slotTime slotTimes   // how long accepted slot calls (the front door's) hold their slot
	waking   atomic.Bool // a background wake of the sleeping Space is running (wake.go)
	parked   atomic.Bool // parked by the autoscaler: a state, not a failure (parked.go)
	// checking: a background probe or hang check of this replica is
	// running (probe.go), so the prober never stacks them.
	checking atomic.Bool
	// reachUnsupported: the liveness check cannot dial the replica the
	// way its requests go (a proxy, a custom transport), so it is skipped.
	reachUnsupported atomic.Bool
}

// replicaName derives the stats name of src: the name part of a Space id,
// host:port of a URL.
func replicaName(src string) string {
	src = strings.TrimSpace(src)
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		if u, err := url.Parse(src); err == nil && u.Host != "" {
			return u.Host
		}
		return src
	}
	if i := strings.LastIndexByte(src, '/'); i >= 0 {
		return src[i+1:]
	}
	return src
}

// publicSource is src without credentials, query or fragment, for stats.
func publicSource(src string) string {
	u, err := url.Parse(src)
	if err != nil || u.Host == "" {
		return src
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

func uniqueNames(srcs []string) []string {
	names := make([]string, len(srcs))
	seen := map[string]int{}
	for i, s := range srcs {
		n := replicaName(s)
		seen[n]++
		if c := seen[n]; c > 1 {
			n += "#" + strconv.Itoa(c)
		}
		names[i] = n
	}
	return names
}

func newReplica(p *Pool, src, name string, live *liveSettings) (*replica, error) {
	r := &replica{p: p, name: name, src: src}
	c := p.cfg
	sp, err := sessionpool.New(sessionpool.Config[*gradio.Client]{
		Connect: func(ctx context.Context) (*gradio.Client, error) {
			// The pool's background refill must not hammer an ejected
			// replica: only a probe (or a caller's acquire after it)
			// connects its app again.
			if err := r.ejectedWithoutApp(); err != nil {
				return nil, err
			}
			// Callers wait for the app here, in the FIFO queue (see
			// acquireSession); the first connect carries the values of the
			// caller that started it, so its trace shows the app's connect.
			app, _, err := r.getAppTraced(ctx)
			if err != nil {
				return nil, err
			}
			return app.NewSession(), nil
		},
		Close:               func(c *gradio.Client) { _ = c.Close() },
		Check:               r.check,
		MinSessions:         live.minConns, // zero: default; negative: none
		MaxSessions:         live.maxConns,
		MaxWaiters:          live.maxWaiters,
		QueueTimeout:        live.queueTimeout,
		PriorityMaxWait:     c.PriorityMaxWait,
		DemandWindow:        c.DemandWindow,
		IdleTimeout:         live.idleTimeout,
		HealthCheckInterval: c.HealthCheckInterval,
		HealthCheckMax:      c.HealthCheckMaxConnections,
		UnhealthyAfter:      c.UnhealthyAfterFailures,
		MaxLifetime:         c.MaxLifetime,
		IdleDisconnect:      c.IdleDisconnect,
		OnEvent:             r.onPoolEvent,
	})
	if err != nil {
		return nil, err
	}
	r.sp = sp
	return r, nil
}

// check is the sessionpool health check: Ping, and on ErrAppChanged start
// the reconnect.
func (r *replica) check(ctx context.Context, c *gradio.Client) error {
	err := c.Ping(ctx)
	if errors.Is(err, gradio.ErrAppChanged) {
		r.appChanged(c)
	}
	r.sawTransportFailure(err)
	return err
}

func (r *replica) onPoolEvent(e sessionpool.Event) {
	ev := Event{Replica: r.name, Duration: e.Duration, Err: e.Err, Waiting: e.Waiting}
	switch e.Kind {
	case sessionpool.EventConnected:
		ev.Kind = EventSessionCreated
	case sessionpool.EventDestroyed:
		ev.Kind, ev.Reason = EventSessionDestroyed, e.Reason.String()
	case sessionpool.EventWaiterAdded:
		ev.Kind = EventQueued
	case sessionpool.EventQueueTimeout:
		ev.Kind = EventQueueTimeout
	case sessionpool.EventQueueFull:
		ev.Kind = EventQueueFull
	case sessionpool.EventHealthCheck:
		ev.Kind = EventHealthCheck
	default:
		return
	}
	r.p.emit(ev)
}

// getApp returns the connected app, connecting it first if needed. All
// callers share one connect (singleflight) that runs on the Pool's context,
// so a caller that gives up does not abort it for the others.
func (r *replica) getApp(ctx context.Context) (*gradio.Client, uint64, error) {
	r.mu.Lock()
	app, gen, closed := r.app, r.gen, r.closed
	r.mu.Unlock()
	if closed {
		return nil, 0, ErrClosed
	}
	if app != nil {
		return app, gen, nil
	}
	ch := r.connect.DoChan("app", func() (any, error) { return nil, r.connectApp() })
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, 0, res.Err
		}
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.app == nil { // changed again meanwhile
		return nil, 0, &gradio.ConnectError{Src: r.src, Err: errors.New("app reconnecting")}
	}
	return r.app, r.gen, nil
}

// appChanged handles ErrAppChanged seen on session s: if s belongs to the
// current app, drop the app (the next session connects again, once) and
// reset the session pool.
func (r *replica) appChanged(s *gradio.Client) {
	r.mu.Lock()
	old := r.app
	if old == nil || old.Config().AppID != s.Config().AppID {
		r.mu.Unlock() // s is from an app generation already replaced
		return
	}
	r.app = nil
	r.mu.Unlock()
	r.p.emit(Event{Kind: EventAppChanged, Replica: r.name})
	r.p.sticky.dropReplica(r)
	r.p.goBackground(func() {
		_ = old.Close()
		r.sp.Reset()
	})
}

// acquireSession returns a pooled session of this replica.
//
// The caller takes its place in the FIFO queue at once, also while the app
// connects (lazy start, reconnect): the session pool's Connect waits for
// the app, and the sessions it makes serve the waiters in arrival order.
// (Waiting for the app first would wake every caller together and let them
// enter the queue in any order.)
func (r *replica) acquireSession(ctx context.Context, prio Priority) (*sessionpool.Session[*gradio.Client], error) {
	s, err := r.sp.AcquirePriority(ctx, prio)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// currentApp returns the connected app and its generation (nil if none).
func (r *replica) currentApp() (*gradio.Client, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.app, r.gen
}

func (r *replica) state() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked(r.p.now())
}

func (r *replica) stateLocked(now time.Time) string {
	switch {
	case r.closed:
		return stateClosed
	case r.parked.Load():
		return StateParked
	case r.suspect:
		return stateSuspect
	case !r.ejectUntil.IsZero() && (now.Before(r.ejectUntil) || r.unreachable):
		return StateEjected // also while the prober checks it: its state changes only with the verdict
	case r.probing:
		return stateProbing
	case !r.ejectUntil.IsZero():
		return StateEjected // back-off over: the next call (or the prober) makes it half-open
	case r.halfOpen:
		return stateHalfOpen
	case r.app != nil:
		return StateReady
	case r.connecting:
		return stateConnecting
	}
	return stateNew
}

// close shuts the replica down: its session pool, then its app.
func (r *replica) close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	app := r.app
	r.app = nil
	r.mu.Unlock()
	err := r.sp.Close(ctx)
	if app != nil {
		_ = app.Close()
	}
	return err
}
