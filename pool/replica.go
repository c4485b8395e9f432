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
	"github.com/gradiopool/gradiopool/internal/backoff"
	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// Replica states shown in Stats.
const (
	StateNew        = "new"        // not connected yet (lazy)
	StateConnecting = "connecting" // first connect in flight
	StateReady      = "ready"      // app connected, taking traffic
	StateEjected    = "ejected"    // failed recently: skipped until its back-off ends
	StateProbing    = "probing"    // back-off over: one caller is checking it
	StateClosed     = "closed"
)

// replica is one Gradio app: its connected app (the factory of sessions,
// fetched once and shared), its session pool and its health state.
type replica struct {
	p    *Pool
	idx  int
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
	fails      int       // consecutive replica-level failures (ejections)
	callFails  int       // consecutive refused calls since the last success
	ejectUntil time.Time // zero: not ejected
	probing    bool      // a caller is probing after the back-off
	lastErr    error
	closed     bool

	calls, errs, failovers atomic.Uint64
	stickyTimeouts         atomic.Uint64 // sticky users who gave up waiting for their own session
	stickyWaiting          atomic.Int32  // sticky users waiting for their own session
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

func newReplica(p *Pool, idx int, src, name string) (*replica, error) {
	r := &replica{p: p, idx: idx, name: name, src: src}
	c := p.cfg
	sp, err := sessionpool.New(sessionpool.Config[*gradio.Client]{
		Connect: func(ctx context.Context) (*gradio.Client, error) {
			// The pool's background refill must not hammer an ejected
			// replica: only a probe (or a caller's acquire after it)
			// connects its app again.
			if err := r.ejectedWithoutApp(); err != nil {
				return nil, err
			}
			app, _, err := r.getApp(ctx)
			if err != nil {
				return nil, err
			}
			return app.NewSession(), nil
		},
		Close:               func(c *gradio.Client) { _ = c.Close() },
		Check:               r.check,
		MinSessions:         c.minConnsSP(),
		MaxSessions:         c.maxConns,
		MaxWaiters:          c.MaxWaiters,
		QueueTimeout:        c.QueueTimeout,
		IdleTimeout:         c.IdleTimeout,
		HealthCheckInterval: c.HealthCheckInterval,
		HealthCheckMax:      c.HealthCheckMaxConnections,
		UnhealthyAfter:      c.UnhealthyAfterFailures,
		MaxLifetime:         c.MaxLifetime,
		OnEvent:             r.onPoolEvent,
	})
	if err != nil {
		return nil, err
	}
	r.sp = sp
	return r, nil
}

// minConnsSP maps our MinConnections to sessionpool's (negative = none).
func (s settings) minConnsSP() int {
	if s.minConns == 0 {
		return -1
	}
	return s.minConns
}

// check is the sessionpool health check: Ping, and on ErrAppChanged start
// the reconnect.
func (r *replica) check(ctx context.Context, c *gradio.Client) error {
	err := c.Ping(ctx)
	if errors.Is(err, gradio.ErrAppChanged) {
		r.appChanged(c)
	}
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
	return err
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

// ejectAfterRefusals is how many calls in a row a replica may refuse (5xx
// or a transport failure on queue/join) before it is ejected: one refusal
// alone moves only that call, so that a blip does not move every user of
// the replica.
const ejectAfterRefusals = 3

// refused records a call the replica refused; the third in a row ejects it.
func (r *replica) refused(err error) {
	r.mu.Lock()
	r.callFails++
	eject := r.callFails >= ejectAfterRefusals
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

// acquireSession returns a pooled session of this replica.
func (r *replica) acquireSession(ctx context.Context) (*sessionpool.Session[*gradio.Client], error) {
	if _, _, err := r.getApp(ctx); err != nil {
		return nil, err
	}
	s, err := r.sp.Acquire(ctx)
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
	switch {
	case r.closed:
		return StateClosed
	case r.probing:
		return StateProbing
	case !r.ejectUntil.IsZero():
		return StateEjected
	case r.app != nil:
		return StateReady
	case r.connecting:
		return StateConnecting
	}
	return StateNew
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
