package sessionpool

import "time"

// Stat is a snapshot of a pool, taken under its lock by [Pool.Stat].
//
// Gauges: Total = Idle + InUse + Checking (open sessions); Connecting are not
// yet open; Total + Connecting never exceeds MaxSessions. Counters only grow
// and cover the pool's whole life.
type Stat struct {
	Total      int // open sessions: idle, in use or under check (the seed's totalConnections)
	Idle       int // free to hand out now (the seed's availableConnections; see Available)
	InUse      int // acquired and not yet released
	Checking   int // idle sessions taken out for a health check: never handed out meanwhile
	Connecting int // Connect calls in flight
	Waiting    int // callers in the FIFO queue (the seed's queueLength; see QueueLength)
	// WaitingHigh, WaitingLow: of Waiting, those of PriorityHigh and
	// PriorityLow (the rest are PriorityNormal).
	WaitingHigh, WaitingLow int
	Healthy                 int // open sessions whose last health check passed or that have not been checked
	Unhealthy               int // open sessions with at least one consecutive failed check

	MinSessions int
	MaxSessions int
	MaxWaiters  int // -1: unbounded

	AcquireCount      int64         // sessions handed out by Acquire
	AcquireDuration   time.Duration // total time those Acquires waited (an idle session at once adds nothing)
	EmptyAcquireCount int64         // Acquires that found no idle session and had to wait
	CanceledAcquires  int64         // Acquires ended by their own context
	QueueTimeouts     int64         // Acquires failed with ErrQueueTimeout
	QueueFull         int64         // Acquires refused with ErrQueueFull

	Created         int64         // successful Connect calls
	DemandConnects  int64         // Connect calls started ahead of demand (DemandWindow)
	Renewals        int64         // Connect calls started to replace an idle session before its retirement
	ConnectFailures int64         // failed Connect calls
	ConnectDuration time.Duration // total time spent in Connect (successful or not)

	DestroyedIdle     int64 // closed after IdleTimeout
	DestroyedHealth   int64 // closed after UnhealthyAfter failed checks
	DestroyedError    int64 // closed by Session.Destroy
	DestroyedLifetime int64 // retired after MaxLifetime
	DestroyedReset    int64 // closed because of Reset
	DestroyedClosed   int64 // closed because of Close

	HealthChecks        int64     // Check calls made
	HealthCheckFailures int64     // Check calls that failed
	HealthCheckEnabled  bool      // periodic checks are scheduled (Check set, interval > 0, initialised, not closed)
	HealthCheckRunning  bool      // a round of checks is in progress
	LastHealthCheck     time.Time // start of the last round; zero before the first

	Initialized bool // the pool has been used (lazy initialisation happened)
	Closed      bool
}

// Available is the seed's name for Idle.
func (s Stat) Available() int { return s.Idle }

// QueueLength is the seed's name for Waiting.
func (s Stat) QueueLength() int { return s.Waiting }

// Destroyed is the sum of the Destroyed* counters.
func (s Stat) Destroyed() int64 {
	return s.DestroyedIdle + s.DestroyedHealth + s.DestroyedError + s.DestroyedLifetime + s.DestroyedReset + s.DestroyedClosed
}

// Stat returns a snapshot of the pool's gauges and counters.
func (p *Pool[T]) Stat() Stat {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stat
	s.Total = p.open
	s.Idle = len(p.idle)
	s.InUse = p.inUse
	s.Checking = p.checking
	s.Connecting = p.connecting
	s.Waiting = p.waitq.n
	byClass := p.waitq.waitingByPriority()
	s.WaitingLow, s.WaitingHigh = byClass[PriorityLow+1], byClass[PriorityHigh+1]
	s.Unhealthy = p.unhealthy
	s.Healthy = p.open - p.unhealthy
	s.MinSessions = p.cfg.MinSessions
	s.MaxSessions = p.cfg.MaxSessions
	s.MaxWaiters = max(p.cfg.MaxWaiters, -1)
	s.CanceledAcquires = p.canceledAcquires.Load()
	s.Initialized = p.initialized
	s.Closed = p.closed
	s.HealthCheckRunning = p.checksInFlight > 0
	s.HealthCheckEnabled = p.initialized && !p.closed && p.cfg.Check != nil && p.cfg.HealthCheckInterval > 0
	s.LastHealthCheck = p.lastHealthCheck
	return s
}
