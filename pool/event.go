package pool

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/logattr"
)

// EventKind says what happened.
type EventKind int

// Event kinds: initialisation, sessions created and destroyed, user
// assignments, queue changes, health checks, errors and time-outs.
const (
	EventInitialized      EventKind = iota + 1 // first Acquire: replicas start warming up
	EventConnected                             // a replica's app config was fetched (Duration = connect time)
	EventConnectFailed                         // one connect attempt failed (Err; Attempt)
	EventAppChanged                            // the app restarted: reconnecting, sessions reset
	EventSessionCreated                        // a pooled session was created
	EventSessionDestroyed                      // a pooled session was destroyed (Reason)
	eventAssigned                              // a user was pinned to Replica (new, or re-pinned: Previous)
	EventQueued                                // a caller waits for a session (Waiting = queue length)
	EventQueueTimeout                          // a waiter gave up after QueueTimeout
	EventHealthCheck                           // a health check of Replica ended (Err on failure)
	EventEjected                               // Replica was ejected until Until after Err
	EventRecovered                             // an ejected Replica served a call again
	EventFailover                              // a call moved from Replica to another (Err = cause)
	EventCallDone                              // a call ended (Duration; Err on failure)
	EventQueueFull                             // a caller was refused: the replica's waiter list was full
	// EventConcurrencyLimited: our calls to Endpoint of Replica waited in
	// the Space's own queue while Concurrency of ours ran there, and
	// MaxConnections is higher: the sessions beyond it only wait inside
	// the Space. Logged once per replica and endpoint.
	EventConcurrencyLimited
	// EventProbePassed: an unreachable or suspect Replica answered a probe
	// again; an ejected one is half-open (trial calls) from now.
	EventProbePassed
	// EventSuspect: Replica left a join or a ping unanswered for
	// Config.HangTimeout (Err): new calls go elsewhere until it answers.
	EventSuspect
	// EventStateLost: a sticky user's own session (gr.State) on Previous
	// was left behind (that replica was removed, drained, failed or
	// restarted): their call runs on Replica with an empty state.
	EventStateLost
	// EventControl: an operator drained, disabled or enabled Replica
	// (Reason: the new control; Previous: the one before).
	EventControl
)

var kindNames = map[EventKind]string{
	EventInitialized: "initialized", EventConnected: "connected", EventConnectFailed: "connect_failed",
	EventAppChanged: "app_changed", EventSessionCreated: "session_created",
	EventSessionDestroyed: "session_destroyed", eventAssigned: "assigned", EventQueued: "queued",
	EventQueueTimeout: "queue_timeout", EventHealthCheck: "health_check", EventEjected: "ejected",
	EventRecovered: "recovered", EventFailover: "failover", EventCallDone: "call_done",
	EventQueueFull: "queue_full", EventConcurrencyLimited: "concurrency_limited",
	EventProbePassed: "probe_passed", EventSuspect: "suspect", EventStateLost: "state_lost", EventControl: "control",
}

func (k EventKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "unknown"
}

// Event is passed to Config.OnEvent. Fields that do not apply are zero.
type Event struct {
	Kind     EventKind
	Time     time.Time
	Replica  string // replica name
	Previous string // eventAssigned: the replica the user was pinned to before, if any; EventControl: the control before
	User     string // first 8 hex digits of the user key; "" for anonymous (never the e-mail)
	Endpoint string // EventCallDone, EventFailover: the api_name called
	// Route is the label of the context the call was made under
	// (WithRoute), e.g. the gateway's door ("v1", "call", "frontdoor"):
	// set on EventFailover and EventCallDone; "" when none.
	Route    string
	Err      error         // the failure, if any
	Duration time.Duration // connect time, call time, health-check time
	Attempt  int           // EventConnectFailed: 1 for the first attempt
	Waiting  int           // EventQueued: waiters on the replica
	Until    time.Time     // EventEjected: end of the back-off
	Reason   string        // EventSessionDestroyed: "idle", "health", "broken", "lifetime", "reset", ...; EventControl: the new control; eventAssigned with Previous: "balance" (routing moved the user) or "failover" (Previous could not take the call)
	// Concurrency is, for EventConcurrencyLimited, the most of our calls
	// seen running at once on the replica's endpoint.
	Concurrency int
}

type routeKey struct{}

// WithRoute returns ctx labelled with route, a short constant naming where
// the calls made under it come from (the gateway passes its door: "v1",
// "call", "frontdoor"). The pool copies it into Event.Route of those
// calls' failovers and ends, so that metrics fed by events can tell the
// doors apart; the pool itself does nothing else with it.
//
// It stays a context value, unlike CallOptions, because it only labels:
// it changes no decision of the pool, and it is request-scoped data that
// the gateway sets once per door (the front door's requests reach Reserve
// several frames down) rather than an option of one call.
func WithRoute(ctx context.Context, route string) context.Context {
	return context.WithValue(ctx, routeKey{}, route)
}

func routeOf(ctx context.Context) string {
	r, _ := ctx.Value(routeKey{}).(string)
	return r
}

// emit delivers an event to the hook and to the logger.
func (p *Pool) emit(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if h := p.cfg.OnEvent; h != nil {
		h(e)
	}
	l := p.cfg.Logger
	if l == nil {
		return
	}
	level := slog.LevelInfo
	switch e.Kind {
	case EventConnectFailed, EventAppChanged, EventQueueTimeout, EventQueueFull, EventEjected, EventFailover,
		EventStateLost,          // the user's gr.State starts empty: the app may behave differently
		EventConcurrencyLimited: // sessions that only wait in the Space: the operator has settings to change
		level = slog.LevelWarn
	case eventAssigned:
		// A new user's pin is routine; a user moved off its replica (its
		// gr.State stays behind) or a failing assignment store is not.
		level = slog.LevelDebug
		if e.Err != nil {
			level = slog.LevelWarn
		} else if e.Previous != "" {
			level = slog.LevelInfo
		}
	case EventQueued, EventSessionCreated, EventSessionDestroyed:
		level = slog.LevelDebug
	case EventHealthCheck, EventCallDone:
		level = slog.LevelDebug
		if e.Err != nil {
			level = slog.LevelWarn
		}
	}
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	if e.Replica != "" {
		attrs = append(attrs, slog.String("replica", e.Replica))
	}
	if e.Previous != "" {
		attrs = append(attrs, slog.String("previous", e.Previous))
	}
	if e.User != "" {
		attrs = append(attrs, slog.String("user", e.User))
	}
	if e.Endpoint != "" {
		attrs = append(attrs, slog.String("endpoint", e.Endpoint))
	}
	if e.Route != "" {
		attrs = append(attrs, slog.String("route", e.Route))
	}
	if e.Duration != 0 {
		attrs = append(attrs, logattr.Ms("duration", e.Duration))
	}
	if e.Attempt != 0 {
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
	}
	if e.Kind == EventQueued {
		attrs = append(attrs, slog.Int("waiting", e.Waiting))
	}
	if !e.Until.IsZero() {
		attrs = append(attrs, slog.Time("until", e.Until))
	}
	if e.Reason != "" {
		attrs = append(attrs, slog.String("reason", e.Reason))
	}
	if e.Kind == EventConcurrencyLimited {
		attrs = append(attrs, slog.Int("effective_concurrency", e.Concurrency), slog.Int("max_connections", p.live.Load().maxConns),
			slog.String("advice", "the Space runs this endpoint's calls at most this many at a time: sessions above it only wait in the Space's queue; lower max_connections, or raise the app's concurrency_limit (per event, default 1) and launch(max_threads=...) (Gradio's default 40 worker threads)"))
	}
	if e.Err != nil {
		var appErr *gradio.AppError
		if errors.As(e.Err, &appErr) {
			// An app's error text often quotes the user's input: its length
			// and keyed hash (the users' key), never the text.
			attrs = append(attrs, slog.String("error", "app error"), slog.Int("error_len", len(appErr.Message)), slog.String("error_hash", p.users.tag(appErr.Message)))
		} else {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
	}
	l.LogAttrs(ctx, level, "pool: "+e.Kind.String(), attrs...)
}
