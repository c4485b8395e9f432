package sessionpool

import (
	"context"
	"log/slog"
	"time"

	"github.com/gradiopool/gradiopool/internal/logattr"
)

// EventKind says what an [Event] reports.
type EventKind uint8

const (
	// EventInit: the pool was used for the first time and started
	// connecting its MinSessions (Event.Total is that number).
	EventInit EventKind = iota + 1
	// EventConnected: a session was created (Duration: connect time).
	EventConnected
	// EventConnectFailed: Connect failed (Err, Duration).
	EventConnectFailed
	// EventDestroyed: a session was closed (Reason).
	EventDestroyed
	// EventWaiterAdded: an Acquire joined the wait queue (Waiting: queue
	// length after it joined).
	EventWaiterAdded
	// EventWaiterServed: a waiter got a session (Duration: time waited).
	EventWaiterServed
	// EventQueueTimeout: a waiter gave up after QueueTimeout (Duration).
	EventQueueTimeout
	// EventAcquireCanceled: a waiter's context ended (Err, Duration).
	EventAcquireCanceled
	// EventQueueFull: an Acquire was refused because MaxWaiters callers
	// were waiting.
	EventQueueFull
	// EventHealthCheck: one active check finished (Err nil: passed;
	// Failures: consecutive failures so far; Duration: check time).
	EventHealthCheck
	// EventReset: Reset was called.
	EventReset
	// EventClosed: Close was called.
	EventClosed
)

var eventKindNames = [...]string{
	EventInit:            "init",
	EventConnected:       "connected",
	EventConnectFailed:   "connect_failed",
	EventDestroyed:       "destroyed",
	EventWaiterAdded:     "waiter_added",
	EventWaiterServed:    "waiter_served",
	EventQueueTimeout:    "queue_timeout",
	EventAcquireCanceled: "acquire_canceled",
	EventQueueFull:       "queue_full",
	EventHealthCheck:     "health_check",
	EventReset:           "reset",
	EventClosed:          "closed",
}

func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && eventKindNames[k] != "" {
		return eventKindNames[k]
	}
	return "unknown"
}

// Reason says why a session was destroyed.
type Reason uint8

const (
	ReasonIdle     Reason = iota + 1 // idle longer than IdleTimeout
	ReasonHealth                     // UnhealthyAfter failed health checks
	ReasonError                      // Session.Destroy (a connection-level failure)
	ReasonLifetime                   // older than MaxLifetime
	ReasonReset                      // Pool.Reset
	ReasonClosed                     // Pool.Close
)

var reasonNames = [...]string{
	ReasonIdle:     "idle",
	ReasonHealth:   "health",
	ReasonError:    "error",
	ReasonLifetime: "lifetime",
	ReasonReset:    "reset",
	ReasonClosed:   "closed",
}

func (r Reason) String() string {
	if int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return "unknown"
}

// Event is passed to Config.OnEvent. Fields that do not apply to a Kind are
// zero.
type Event struct {
	Kind      EventKind
	SessionID uint64        // the session concerned, if any (see Session.ID)
	Reason    Reason        // EventDestroyed
	Err       error         // EventConnectFailed, EventHealthCheck, EventAcquireCanceled
	Duration  time.Duration // see each Kind
	Failures  int           // EventHealthCheck: consecutive failed checks
	Waiting   int           // queue length right after the event (0 in EventWaiterServed)
	Total     int           // sessions open + connecting right after the event (0 in EventWaiterServed)
}

// LogValue makes events log as flat groups of their meaningful fields.
func (e Event) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("event", e.Kind.String()))
	if e.SessionID != 0 {
		attrs = append(attrs, slog.Uint64("session", e.SessionID))
	}
	if e.Reason != 0 {
		attrs = append(attrs, slog.String("reason", e.Reason.String()))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("err", e.Err.Error()))
	}
	if e.Duration != 0 {
		attrs = append(attrs, logattr.Ms("duration", e.Duration))
	}
	if e.Kind == EventHealthCheck {
		attrs = append(attrs, slog.Int("failures", e.Failures))
	}
	attrs = append(attrs, slog.Int("waiting", e.Waiting), slog.Int("total", e.Total))
	return slog.GroupValue(attrs...)
}

func (e Event) level() slog.Level {
	switch e.Kind {
	case EventConnectFailed, EventQueueTimeout, EventQueueFull:
		return slog.LevelWarn
	case EventHealthCheck:
		if e.Err != nil {
			return slog.LevelWarn
		}
		return slog.LevelDebug
	case EventDestroyed:
		if e.Reason == ReasonError || e.Reason == ReasonHealth {
			return slog.LevelWarn
		}
		return slog.LevelInfo
	case EventWaiterAdded, EventWaiterServed, EventAcquireCanceled:
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// emit delivers e to the hooks. WARNING: never call it with p.mu held.
func (p *Pool[T]) emit(e Event) {
	if p.cfg.OnEvent != nil {
		p.cfg.OnEvent(e)
	}
	if l := p.cfg.Logger; l != nil {
		lvl := e.level()
		if l.Enabled(context.Background(), lvl) {
			l.LogAttrs(context.Background(), lvl, "sessionpool: "+e.Kind.String(), slog.Any("pool", e))
		}
	}
}
