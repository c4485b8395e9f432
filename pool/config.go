package pool

import (
	"cmp"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool/assign"
	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// Defaults for zero fields of [Config]: the seed design's numbers, the one
// place they are declared. Others read them back from
// [Config.WithDefaults] (the gateway's settings table, its usage text and
// docs/configuration.md do). Where package sessionpool has the same knob,
// the number is its default, so the two cannot drift.
//
// Vocabulary: a "connection" (the seed's word, kept in the configuration)
// is one pooled Gradio session of a replica; package sessionpool calls it a
// session. One session serves one call at a time.
//
// The rule for every numeric field: zero means the default; a negative
// value turns the feature off where it can be turned off (documented per
// field) and is passed on as it is, never mapped to zero.
const (
	defaultMinConnections            = sessionpool.DefaultMinSessions
	defaultMaxConnections            = sessionpool.DefaultMaxSessions
	defaultIdleTimeout               = sessionpool.DefaultIdleTimeout
	defaultQueueTimeout              = sessionpool.DefaultQueueTimeout
	defaultMaxWaiters                = sessionpool.DefaultMaxWaiters
	defaultHealthCheckInterval       = sessionpool.DefaultHealthCheckInterval
	defaultHealthCheckMaxConnections = sessionpool.DefaultHealthCheckMax
	defaultUnhealthyAfterFailures    = sessionpool.DefaultUnhealthyAfter
	defaultConnectRetries            = 3
	defaultConnectRetryDelay         = 250 * time.Millisecond
	// defaultStalledConnect: a connect under way this long no longer gets
	// new users or moves while another replica is connected. A Gradio
	// app's /config usually answers well within it; the start-up connects
	// (every replica at once) then keep the round robin even.
	defaultStalledConnect     = 2 * time.Second
	defaultEjectAfterRefusals = 3
	defaultUserAssignmentTTL  = time.Hour
	// defaultMaxUserAssignments: about 100 bytes each in the in-memory
	// store, 10 MiB for the lot.
	defaultMaxUserAssignments = 100_000
	defaultEjectBase          = time.Second
	defaultEjectMax           = time.Minute
	defaultProbeTimeout       = 10 * time.Second
	defaultPriorityMaxWait    = sessionpool.DefaultPriorityMaxWait
	defaultProbeInterval      = 2 * time.Second
	defaultHangTimeout        = 10 * time.Second
	defaultLivenessInterval   = 2 * time.Second
	// livenessTimeout bounds one liveness check's TCP connect: a host
	// that does not answer the connect that long is taken as down.
	livenessTimeout = 5 * time.Second
)

// Config configures [New]. The zero value of every field but Replicas means
// its documented default.
type Config struct {
	// Replicas are the Gradio apps that serve the same app: Hugging Face Space
	// ids ("owner/name") or http(s) URLs. Their order is the round-robin
	// order. At least one is required; duplicates are an error.
	//
	// Each replica is named in stats and logs by the name part of its Space
	// id ("app" for "owner/app") or by host:port for a URL; a clash gets "#2", "#3".
	Replicas []string

	// MinConnections is how many sessions each replica keeps warm once the
	// pool is initialised (lazily, by the first Acquire). Zero means
	// 5; negative means none.
	MinConnections int
	// MaxConnections caps the sessions, hence the calls in flight, per
	// replica. Zero means 50.
	MaxConnections int
	// IdleTimeout removes a session idle for that long (never below
	// MinConnections). Zero means 10 min; negative
	// disables.
	IdleTimeout time.Duration
	// QueueTimeout bounds the wait for a free session (FIFO per replica),
	// including the connect of a replica's app that is not connected yet
	// (the waiter keeps its place meanwhile); the waiter then gets
	// ErrQueueTimeout. Zero means 30 s; negative disables (wait as long as the context allows).
	QueueTimeout time.Duration
	// PriorityMaxWait is the starvation bound of priority classes (see
	// [CallOptions].Priority): a waiter that has waited this long is served before
	// younger waiters of higher classes. Zero means
	// 10 s; negative means strict
	// priority (never promoted).
	PriorityMaxWait time.Duration
	// MaxWaiters bounds each replica's waiter list; a caller beyond it is
	// routed to another replica, or gets ErrQueueFull when all are full.
	// Zero means 1000; negative means
	// unbounded.
	MaxWaiters int
	// HealthCheckInterval is how often each replica checks some of its idle
	// sessions (Ping). Zero means 5 min;
	// negative disables health checks.
	HealthCheckInterval time.Duration
	// HealthCheckMaxConnections is how many idle sessions one health check
	// visits per replica, least recently used first. Zero means
	// 5; negative means all idle sessions.
	HealthCheckMaxConnections int
	// UnhealthyAfterFailures destroys a session after that many consecutive
	// failed health checks. Zero means 3;
	// negative means never (failures are only counted as unhealthy).
	UnhealthyAfterFailures int
	// ConnectRetries is how many times a connect that failed in transport
	// (*gradio.ConnectError: time-out, refused, reset) is retried on the same
	// replica, with a growing delay from 250 ms, before the
	// next replica is tried. Metadata errors (*gradio.MetadataError,
	// *gradio.SpaceError) are never retried on the same replica. Zero means
	// 3, so at most 4 attempts; negative means no
	// retry.
	ConnectRetries int
	// EjectAfterRefusals ejects a replica that refused that many calls in a
	// row (a 5xx or a transport failure on queue/join); one refusal alone
	// only moves that call, so a blip does not move every user of the
	// replica. Zero means 3; negative means
	// refusals never eject (connect failures still do).
	EjectAfterRefusals int
	// ProbeInterval is how often replicas are probed in the background,
	// whatever the traffic: an unreachable replica (connect or transport
	// failure) is connected again, so its capacity returns within one
	// interval of it serving again; a replica with calls in flight is
	// pinged to notice it hanging (HangTimeout). Zero means
	// 2 s; negative: no background probes (an
	// ejected replica is probed by the first call after its back-off).
	ProbeInterval time.Duration
	// HangTimeout marks a replica suspect (hung) when a join or a ping
	// stays unanswered that long: new calls go elsewhere, calls it
	// accepted keep waiting (they are never run twice), and it takes calls
	// again once it answers. Zero means 10 s (well
	// under the 30 s queue time-out); negative: off.
	HangTimeout time.Duration
	// LivenessInterval is how often every connected replica in service is
	// checked cheaply for being alive: a TCP connect to its host, no
	// request (so it can neither wake a sleeping Space nor queue
	// anything). A replica found not listening (it died, idle or not) is
	// ejected as unreachable at once, shown down in Stats, /readyz and the
	// metrics, and connected again by the prober (ProbeInterval) once it
	// listens again. It cannot see a process that accepts connections but
	// is hung (HangTimeout does), nor a Space behind the Hub's proxy (the
	// proxy answers); the health check (HealthCheckInterval) stays the
	// deeper check. Zero means 2 s; negative: off.
	LivenessInterval time.Duration
	// UserAssignmentTTL is how long a user stays pinned to a replica after
	// their last call: every call refreshes it, so an active user never
	// moves unless their replica fails. Zero means
	// 1 h; negative means assignments never expire.
	UserAssignmentTTL time.Duration
	// MaxUserAssignments bounds the users the pool keeps state for: their
	// assignments in its own in-memory store (not in a Store given to it,
	// e.g. Redis, which bounds itself) and, with StickySessions, their
	// own sessions. A new user past it evicts the least recently used one
	// (Stats.UserAssignmentsEvicted), who is assigned afresh at their next
	// call. Zero means 100 000; negative: no bound (only the TTL).
	MaxUserAssignments int
	// Routing chooses the replica of anonymous calls: RouteExpectedTime
	// (zero, the default) weighs each Space's own queue and run time;
	// RouteLeastInUse counts only our calls.
	Routing Routing
	// RebalanceFactor moves a registered user off their replica when a
	// call is expected to complete more than this many times later there
	// than on the quickest replica (then they are pinned to that one).
	// Zero (default) or less: users stay on their replica (stickiness
	// first); e.g. 3 moves a user whose replica is three times slower.
	RebalanceFactor float64
	// MaxLifetime retires a session older than that, less a random 0-10 %
	// (at release, or while idle, its replacement connected first). Zero
	// (default) means no limit.
	MaxLifetime time.Duration
	// IdleDisconnect is the Space's known idle disconnect (a session it
	// drops after that long without use): idle sessions are replaced
	// before it, while idle, the replacement ready first. Zero (default)
	// or negative: none.
	IdleDisconnect time.Duration
	// HashKey keys the HMAC-SHA256 that turns e-mails into user keys. Set
	// it (e.g. from a secret) so that keys are stable across restarts and
	// across gateway instances sharing a Store; nil means a random key per
	// Pool.
	HashKey []byte
	// StickySessions gives each registered user their own Gradio session
	// (session hash) on their replica for UserAssignmentTTL, so that gr.State
	// survives between calls of a stateful app. A user's calls then run one
	// at a time: a call waits (up to QueueTimeout) while the same user's
	// previous call still runs, and then, like any call, for a slot of the
	// replica's pool (up to QueueTimeout again). Each reserved session is a
	// session hash without network cost, but its app-side state lives until
	// the reservation ends. Anonymous users are never sticky.
	StickySessions bool
	// DemandWindow turns on demand tracking per replica: a moving average
	// (over about this window) of the sessions in use plus waiting; while
	// the load rises above it, sessions are opened ahead of it, and when it
	// falls they age out by IdleTimeout (see sessionpool.Config). Zero
	// (default) or negative: off. Creating a Gradio session costs no network
	// once the replica's app is connected, so this matters mostly for the
	// replica's first minutes and for session types that are costly.
	DemandWindow time.Duration
	// WakeSleeping wakes a replica's Space found sleeping (Hub stage
	// SLEEPING) in the background, so that the users pinned to it find it
	// running on their next call; calls meanwhile fail over at once as
	// without it. Default off: a sleeping Space is retried only after its
	// ejection back-off.
	WakeSleeping bool
	// WarmUp initialises the pool in New (each replica connects and opens
	// MinConnections sessions in the background) instead of at the first
	// call: a slower start instead of a slower first call. Default off
	// (the seed's lazy start).
	WarmUp bool
	// ClientOptions are passed to gradio.Connect for every replica (token,
	// Hub URL, headers, wake time-out, ...). The pool's sessions open no
	// /heartbeat stream, whatever the app's config asks (see
	// Pool.clientOptions); gradio.WithHeartbeat(true) here opens one per
	// session again.
	ClientOptions []gradio.Option
	// Logger receives the pool's logs (initialisation, sessions, assignments,
	// queue, health checks, errors, failovers). Nil logs nothing. E-mails are
	// never logged; users appear as the first 8 hex digits of their key.
	Logger *slog.Logger
	// Store holds user assignments. Nil means an in-memory store owned (and
	// closed) by the Pool.
	Store assign.Store
	// OnEvent, if set, is called synchronously for every [Event]; it must be
	// quick and must not call back into the Pool. Use it for metrics.
	OnEvent func(Event)
	// TracerProvider makes the OpenTelemetry spans of each call (a
	// "gradiopool.call" span and its children, see tracing.go). Nil means the global provider (otel.GetTracerProvider: no
	// spans until the program sets one).
	TracerProvider trace.TracerProvider
	// Limiter, if set, must grant a permit before a session of a replica is
	// lent (see [Limiter]); e.g. pool/cluster's limit shared by several
	// gateways. Nil means MaxConnections per replica in this Pool alone.
	Limiter Limiter
}

// WithDefaults returns c with every zero field that has a default set to
// it: the effective configuration, as [New] uses it (like pgxpool.Config
// after ParseConfig). Negative "off" values are kept as they are, so
// WithDefaults is idempotent; a MinConnections above MaxConnections is kept
// too (New clamps it), so that a caller can report it. The defaults of the
// pool's keys are applied here and nowhere else.
func (c Config) WithDefaults() Config {
	c.MaxConnections = cmp.Or(c.MaxConnections, defaultMaxConnections)
	if c.MinConnections == 0 {
		c.MinConnections = min(defaultMinConnections, c.MaxConnections)
	}
	c.IdleTimeout = cmp.Or(c.IdleTimeout, defaultIdleTimeout)
	c.QueueTimeout = cmp.Or(c.QueueTimeout, defaultQueueTimeout)
	c.PriorityMaxWait = cmp.Or(c.PriorityMaxWait, defaultPriorityMaxWait)
	c.MaxWaiters = cmp.Or(c.MaxWaiters, defaultMaxWaiters)
	c.HealthCheckInterval = cmp.Or(c.HealthCheckInterval, defaultHealthCheckInterval)
	c.HealthCheckMaxConnections = cmp.Or(c.HealthCheckMaxConnections, defaultHealthCheckMaxConnections)
	c.UnhealthyAfterFailures = cmp.Or(c.UnhealthyAfterFailures, defaultUnhealthyAfterFailures)
	c.ConnectRetries = cmp.Or(c.ConnectRetries, defaultConnectRetries)
	c.EjectAfterRefusals = cmp.Or(c.EjectAfterRefusals, defaultEjectAfterRefusals)
	c.UserAssignmentTTL = cmp.Or(c.UserAssignmentTTL, defaultUserAssignmentTTL)
	c.MaxUserAssignments = cmp.Or(c.MaxUserAssignments, defaultMaxUserAssignments)
	c.Routing = cmp.Or(c.Routing, RouteExpectedTime)
	c.ProbeInterval = cmp.Or(c.ProbeInterval, defaultProbeInterval)
	c.HangTimeout = cmp.Or(c.HangTimeout, defaultHangTimeout)
	c.LivenessInterval = cmp.Or(c.LivenessInterval, defaultLivenessInterval)
	return c
}

// settings is Config with every default applied and the "off" values
// mapped to what the code tests.
type settings struct {
	Config
	maxConns            int
	ejectBase, ejectMax time.Duration
	connectRetryDelay   time.Duration
	stalledConnect      time.Duration // see replica.connectStalled
	probeTimeout        time.Duration
	trialWindow         time.Duration    // a half-open round without a verdict lets more trials through after it
	clock               func() time.Time // time.Now; tests inject theirs
	tracer              trace.Tracer
}

func (c Config) withDefaults() settings {
	s := settings{Config: c.WithDefaults()}
	s.maxConns = s.MaxConnections
	// A minimum above the maximum is clamped; negative (none) passes on.
	s.MinConnections = min(s.MinConnections, s.maxConns)
	// Negative counts mean none.
	s.ConnectRetries = max(s.ConnectRetries, 0)
	s.EjectAfterRefusals = max(s.EjectAfterRefusals, 0)
	s.ejectBase, s.ejectMax = defaultEjectBase, defaultEjectMax
	s.connectRetryDelay = defaultConnectRetryDelay
	s.stalledConnect = defaultStalledConnect
	s.probeTimeout = defaultProbeTimeout
	s.trialWindow = 2 * s.ejectBase
	s.clock = time.Now
	s.tracer = tracerOf(c.TracerProvider)
	return s
}
