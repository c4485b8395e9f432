package sessionpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults applied by [New] to zero fields of [Config]. The first seven are
// the seed design's numbers (per replica).
const (
	DefaultMinSessions         = 5
	DefaultMaxSessions         = 50
	DefaultQueueTimeout        = 30 * time.Second
	DefaultIdleTimeout         = 10 * time.Minute
	DefaultHealthCheckInterval = 5 * time.Minute
	DefaultHealthCheckMax      = 5
	DefaultUnhealthyAfter      = 3

	// DefaultMaxWaiters bounds the FIFO queue: twenty callers per session of
	// a default-sized pool, enough to ride out a burst while keeping the
	// memory and the worst-case wait (QueueTimeout) of a runaway client
	// bounded.
	DefaultMaxWaiters = 1000
	// DefaultHealthCheckTimeout bounds one Config.Check call.
	DefaultHealthCheckTimeout = 10 * time.Second
	// DefaultConnectTimeout bounds one Config.Connect call. It is generous
	// because waking a sleeping Hugging Face Space takes minutes.
	DefaultConnectTimeout = 5 * time.Minute
	// DefaultRetryDelay is the first pause before the pool retries
	// connecting to refill MinSessions after a failed connect; it doubles
	// after each consecutive failure up to DefaultMaxRetryDelay.
	DefaultRetryDelay    = time.Second
	DefaultMaxRetryDelay = 30 * time.Second
	// HealthCheckJitter is the fraction by which each health-check interval
	// is randomly lengthened or shortened, so that the pools of several
	// replicas (or gateways) do not check in lock step.
	HealthCheckJitter = 0.1
	// LifetimeJitter is the largest fraction by which each session's
	// MaxLifetime is randomly shortened, so that sessions connected together
	// are not all replaced at the same moment.
	LifetimeJitter = 0.1
	// DefaultPriorityMaxWait is the starvation bound of priority classes:
	// a third of DefaultQueueTimeout, so that a low-priority waiter is
	// promoted well before it would time out.
	DefaultPriorityMaxWait = 10 * time.Second
)

// Config configures a [Pool]. The zero value of every field except Connect
// means "the default"; where a feature can be turned off, a negative value
// does it. Durations are time.Duration values (nanoseconds).
type Config[T any] struct {
	// Connect creates one session. Required. Its context is detached from
	// the cancellation of the Acquire that caused it (it keeps that
	// caller's values): a session whose caller gave up still joins the pool
	// and serves the next waiter. The context is cancelled by Close and ends
	// after ConnectTimeout. Connect may be called from several goroutines
	// at once.
	Connect func(ctx context.Context) (T, error)

	// Close destroys a session. It is called exactly once for every session
	// Connect returned, from a goroutine of the pool's own, never under the
	// pool's lock. nil: sessions are dropped without a call.
	Close func(T)

	// Check is a cheap active health check of an idle session (for a
	// Gradio client: Ping). nil: no active checks. It runs with a context
	// that ends after HealthCheckTimeout or at Close. A non-nil error
	// counts as one failure; UnhealthyAfter consecutive failures destroy the
	// session. A check is not a use: it does not delay idle removal.
	Check func(ctx context.Context, s T) error

	// MinSessions is the number of sessions the pool keeps once it has been
	// used (lazily: nothing connects before the first Acquire or Warm).
	// Idle removal never goes below it and destroyed sessions are replaced
	// in the background while below it. 0: DefaultMinSessions (5, or
	// MaxSessions if that is smaller); negative: no minimum.
	MinSessions int

	// MaxSessions caps the sessions of the pool, counting those still
	// connecting. 0: DefaultMaxSessions (50). Negative: error.
	MaxSessions int

	// MaxWaiters caps the FIFO queue of callers waiting for a session; an
	// Acquire that finds it full fails at once with ErrQueueFull.
	// 0: DefaultMaxWaiters (1000); negative: unbounded.
	MaxWaiters int

	// QueueTimeout bounds how long an Acquire waits for a session (for a
	// released one or for one being connected for it); then it fails with
	// ErrQueueTimeout. 0: DefaultQueueTimeout (30 s); negative: wait until
	// the caller's context ends.
	QueueTimeout time.Duration

	// PriorityMaxWait is the starvation bound of priority classes (see
	// [Priority]): a waiter that has waited this long is served before
	// younger waiters of higher classes. 0: DefaultPriorityMaxWait (10 s);
	// negative: never promoted (strict priority).
	PriorityMaxWait time.Duration

	// DemandWindow turns on demand tracking: a moving average (over about
	// this window) of the sessions in use plus callers waiting; while the
	// demand rises above it, the pool opens sessions ahead of it (as many
	// beyond the demand as the rise), up to MaxSessions; when it falls, the
	// spare sessions go idle and IdleTimeout closes them (never below
	// MinSessions). 0 or negative (default): off: sessions are opened only
	// for callers who need one now.
	DemandWindow time.Duration

	// IdleTimeout closes sessions that have been idle (not acquired) for
	// longer, never going below MinSessions. 0: DefaultIdleTimeout (10 min);
	// negative: idle sessions are kept.
	IdleTimeout time.Duration

	// HealthCheckInterval is the pause between two rounds of health checks,
	// randomly varied by ±HealthCheckJitter. 0: DefaultHealthCheckInterval
	// (5 min); negative: no active checks. Ignored when Check is nil.
	HealthCheckInterval time.Duration

	// HealthCheckMax is how many idle sessions one round checks, least
	// recently used first. 0: DefaultHealthCheckMax (5); negative: all idle
	// sessions.
	HealthCheckMax int

	// HealthCheckTimeout bounds one Check call. 0: DefaultHealthCheckTimeout
	// (10 s); negative: no bound other than Close.
	HealthCheckTimeout time.Duration

	// UnhealthyAfter is the number of consecutive failed checks after which
	// a session is destroyed (and replaced when below MinSessions).
	// 0: DefaultUnhealthyAfter (3); negative: never destroyed by checks
	// (they are only counted as unhealthy in Stat).
	UnhealthyAfter int

	// MaxLifetime retires sessions older than this (less a random 0-10 %,
	// LifetimeJitter) before they are handed out again (pre-emptive
	// reconnection): an idle session gets its replacement connected twice
	// the average connect time before it is retired (see IdleDisconnect),
	// one in use is destroyed on release, never during a call.
	// 0 or negative: sessions live until idle removal, a failed check or
	// Destroy.
	MaxLifetime time.Duration

	// IdleDisconnect is the app's known idle disconnect: it drops a
	// session idle for that long. The pool retires an idle session before
	// that (a replacement connected first, twice the average connect time
	// ahead), even at MinSessions, so that it never lends a dropped one.
	// 0 or negative (default): the app drops none.
	IdleDisconnect time.Duration

	// ConnectTimeout bounds one Connect call. 0: DefaultConnectTimeout
	// (5 min); negative: no bound other than Close.
	ConnectTimeout time.Duration

	// RetryDelay is the pause before the pool tries again to refill
	// MinSessions after a failed background connect; it doubles with every
	// consecutive failure up to MaxRetryDelay. Callers waiting in the queue
	// do not wait for it: a waiter left without a connect in flight gets
	// one at once. 0: DefaultRetryDelay (1 s), DefaultMaxRetryDelay (30 s).
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration

	// OnEvent, if set, is called for every [Event] (the seed's logging list:
	// initialisation, sessions created and destroyed, queue changes,
	// health-check results, errors and time-outs). It is called from the
	// goroutine where the event happened, after the pool's lock has been
	// released, possibly from several goroutines at once; it must be quick
	// and may call Stat, but must not block on the pool.
	OnEvent func(Event)

	// Logger, if set, receives the same events as OnEvent as structured
	// records (failures at Warn, routine queue traffic at Debug). nil: no
	// logging. Session values are never logged.
	Logger *slog.Logger
}

// normalize returns cfg with defaults applied, or an error for settings that
// cannot work.
func (cfg Config[T]) normalize() (Config[T], error) {
	if cfg.Connect == nil {
		return cfg, errors.New("sessionpool: Config.Connect is nil")
	}
	switch {
	case cfg.MaxSessions < 0:
		return cfg, fmt.Errorf("sessionpool: MaxSessions %d is negative", cfg.MaxSessions)
	case cfg.MaxSessions == 0:
		cfg.MaxSessions = DefaultMaxSessions
	}
	switch {
	case cfg.MinSessions < 0:
		cfg.MinSessions = 0
	case cfg.MinSessions == 0:
		cfg.MinSessions = min(DefaultMinSessions, cfg.MaxSessions)
	case cfg.MinSessions > cfg.MaxSessions:
		return cfg, fmt.Errorf("sessionpool: MinSessions %d exceeds MaxSessions %d", cfg.MinSessions, cfg.MaxSessions)
	}
	cfg.MaxWaiters = cmp.Or(cfg.MaxWaiters, DefaultMaxWaiters)
	cfg.QueueTimeout = cmp.Or(cfg.QueueTimeout, DefaultQueueTimeout)
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout)
	cfg.PriorityMaxWait = cmp.Or(cfg.PriorityMaxWait, DefaultPriorityMaxWait)
	cfg.HealthCheckInterval = cmp.Or(cfg.HealthCheckInterval, DefaultHealthCheckInterval)
	cfg.HealthCheckMax = cmp.Or(cfg.HealthCheckMax, DefaultHealthCheckMax)
	cfg.HealthCheckTimeout = cmp.Or(cfg.HealthCheckTimeout, DefaultHealthCheckTimeout)
	cfg.UnhealthyAfter = cmp.Or(cfg.UnhealthyAfter, DefaultUnhealthyAfter)
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, DefaultConnectTimeout)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, DefaultRetryDelay)
	cfg.MaxRetryDelay = cmp.Or(cfg.MaxRetryDelay, DefaultMaxRetryDelay)
	if cfg.RetryDelay < 0 {
		cfg.RetryDelay = DefaultRetryDelay
	}
	if cfg.MaxRetryDelay < cfg.RetryDelay {
		cfg.MaxRetryDelay = cfg.RetryDelay
	}
	if cfg.MaxLifetime < 0 {
		cfg.MaxLifetime = 0
	}
	if cfg.IdleDisconnect < 0 {
		cfg.IdleDisconnect = 0
	}
	return cfg, nil
}
