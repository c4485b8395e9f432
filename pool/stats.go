package pool

import (
	"context"
	"time"
)

// Stats is a snapshot of the pool, shaped as the seed's pool-stats JSON
// (GET /api/admin/pool-stats): the json names of the seed's fields are
// exact; the other fields are additions. It never contains an e-mail.
type Stats struct {
	Pools                map[string]ReplicaStats `json:"pools"`
	TotalConnections     int                     `json:"totalConnections"`
	AvailableConnections int                     `json:"availableConnections"`
	InUseConnections     int                     `json:"inUseConnections"`
	TotalQueued          int                     `json:"totalQueued"`
	UserAssignments      int                     `json:"userAssignments"`
	Initialized          bool                    `json:"initialized"`
	// HealthCheckRunning is true while a health check of some replica is
	// in progress.
	HealthCheckRunning bool `json:"healthCheckRunning"`
	// LastHealthCheck is when the last round of health checks started
	// (UTC, RFC 3339, whole seconds);
	// nil (JSON null) before the first.
	LastHealthCheck *time.Time `json:"lastHealthCheck"`

	// Additions.
	Replicas       []string `json:"replicas"` // replica names in configuration order
	Ready          bool     `json:"ready"`
	StickySessions int      `json:"stickySessions"` // users holding their own session
	Calls          uint64   `json:"calls"`
	Errors         uint64   `json:"errors"`
	AppErrors      uint64   `json:"appErrors"`
	Failovers      uint64   `json:"failovers"`
	// StateLost counts sticky users whose own session (gr.State) stayed on
	// a replica they moved off (removed, drained, failed): their call ran
	// elsewhere with an empty state.
	StateLost uint64 `json:"stateLost"`
	// UserAssignmentsEvicted counts the users forgot for
	// Config.MaxUserAssignments (least recently used first).
	UserAssignmentsEvicted uint64 `json:"userAssignmentsEvicted"`
}

// ReplicaStats is one replica's entry of Stats.Pools.
type ReplicaStats struct {
	TotalConnections     int `json:"totalConnections"`     // sessions open (idle + in use)
	AvailableConnections int `json:"availableConnections"` // idle sessions
	InUseConnections     int `json:"inUseConnections"`     // sessions lent to calls
	QueueLength          int `json:"queueLength"`          // callers waiting for a session
	HealthyConnections   int `json:"healthyConnections"`   // sessions whose last check passed (or not checked yet)
	UnhealthyConnections int `json:"unhealthyConnections"` // sessions whose last check failed

	// Additions.
	Source string `json:"source"`        // Space id or URL (credentials removed)
	URL    string `json:"url,omitempty"` // resolved base URL, once connected
	State  string `json:"state"`         // new, connecting, ready, ejected, probing, half-open, suspect, closed
	// Operator is the operator's control (control.go): enabled, draining
	// (no new calls, some still running), drained or disabled.
	Operator            string     `json:"operator"`
	Connecting          int        `json:"connecting"`          // sessions being created
	ReservedSessions    int        `json:"reservedSessions"`    // sticky users' own sessions
	Calls               uint64     `json:"calls"`               // calls submitted (attempts)
	Errors              uint64     `json:"errors"`              // calls that failed here (not counting caller errors, cancellations or app errors)
	AppErrors           uint64     `json:"appErrors"`           // calls the app answered with an error (gr.Error): the replica worked
	Failovers           uint64     `json:"failovers"`           // calls moved away from this replica
	Acquires            uint64     `json:"acquires"`            // sessions requested
	QueueTimeouts       uint64     `json:"queueTimeouts"`       // waiters that gave up
	SessionsCreated     uint64     `json:"sessionsCreated"`     // sessions created over the pool's life
	SessionsDestroyed   uint64     `json:"sessionsDestroyed"`   // sessions destroyed (idle, health, broken, ...)
	ConsecutiveFailures int        `json:"consecutiveFailures"` // replica-level failures in a row
	EjectedUntil        *time.Time `json:"ejectedUntil,omitempty"`
	// EjectedSecondsLeft is the time left of the ejection's back-off
	// (0 once over; an unreachable replica stays ejected until a probe
	// connects).
	EjectedSecondsLeft float64 `json:"ejectedSecondsLeft,omitempty"`
	// Unreachable: the ejection is for a failed connect or transport; the
	// background prober connects it again.
	Unreachable bool `json:"unreachable,omitempty"`
	// PermanentFailure: the last connect failure cannot pass by itself (no
	// such Space, a token refused); it is retried every ejectMax (1 min).
	PermanentFailure bool   `json:"permanentFailure,omitempty"`
	LastError        string `json:"lastError,omitempty"`
	// LastErrorAt is when the failure in LastError began (its ejection,
	// or the hang). LastError is kept after the replica recovers: compare
	// with State (a dashboard shows it only while the replica is not ready).
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`

	// SpaceQueue is the Space's own queue as it reported it (estimation
	// messages of our calls), summed over endpoints, less what it has
	// worked off since (estimated).
	SpaceQueue int `json:"spaceQueue"`
	// SpaceETA is the time, in seconds, a new call is expected to take
	// there: the work queued ahead of it at the Space and for our
	// sessions, spread over the Space's effective concurrency, plus its own
	// run (what anonymous routing compares).
	SpaceETA float64 `json:"spaceEtaSeconds"`
	// Endpoints details SpaceQueue per endpoint the pool has called.
	Endpoints map[string]EndpointLoad `json:"endpoints,omitempty"`
}

// down reports the states of a replica that takes no normal traffic:
// ejected (unreachable or refusing), probed, on trial or hung.
func down(state string) bool {
	switch state {
	case StateEjected, stateProbing, stateHalfOpen, stateSuspect, stateClosed:
		return true
	}
	return false
}

// statsStoreTimeout bounds the Store.Len call of Stats (a shared store does
// network I/O).
const statsStoreTimeout = 2 * time.Second

// Stats returns a snapshot of the pool. ctx bounds the one network call it
// may make: counting the assignments of a shared Store (at most
// statsStoreTimeout; on failure the count is left at zero).
func (p *Pool) Stats(ctx context.Context) Stats {
	list := p.set.Load().list
	st := Stats{
		Pools:       make(map[string]ReplicaStats, len(list)),
		Replicas:    names(list),
		Initialized: p.initialized.Load(),
		Ready:       p.Ready(),
		StateLost:   p.stateLost.Load(),
	}
	reserved := p.sticky.count()
	now := p.now()
	fallback := p.processTimes()
	var lastHealth time.Time
	for _, r := range list {
		s := r.sp.Stat()
		rs := ReplicaStats{
			TotalConnections:     s.Total,
			AvailableConnections: s.Idle,
			InUseConnections:     s.InUse,
			QueueLength:          s.Waiting + int(r.stickyWaiting.Load()) + p.limiterWaiting(r),
			HealthyConnections:   s.Healthy,
			UnhealthyConnections: s.Unhealthy,
			Source:               publicSource(r.src),
			State:                r.state(),
			Connecting:           s.Connecting,
			ReservedSessions:     reserved[r],
			Calls:                r.calls.Load(),
			Errors:               r.errs.Load(),
			AppErrors:            r.appErrs.Load(),
			Failovers:            r.failovers.Load(),
			Acquires:             uint64(s.AcquireCount),
			QueueTimeouts:        uint64(s.QueueTimeouts) + r.stickyTimeouts.Load(),
			SessionsCreated:      uint64(s.Created),
			SessionsDestroyed:    uint64(s.Destroyed()),
		}
		rs.Operator = r.operatorState(s.InUse)
		r.capacityStats(&rs, now, fallback)
		if down(rs.State) {
			// Its sessions are no capacity while it is down: none is shown
			// healthy or available (they stay counted as open).
			rs.UnhealthyConnections += rs.HealthyConnections
			rs.HealthyConnections, rs.AvailableConnections = 0, 0
		}
		r.mu.Lock()
		rs.URL = publicSource(r.baseURL)
		rs.ConsecutiveFailures = r.fails
		if !r.ejectUntil.IsZero() {
			t := r.ejectUntil.UTC()
			rs.EjectedUntil = &t
			rs.EjectedSecondsLeft = max(0, r.ejectUntil.Sub(now).Seconds())
		}
		rs.Unreachable, rs.PermanentFailure = r.unreachable && !r.ejectUntil.IsZero(), r.permanent
		if r.lastErr != nil {
			rs.LastError = r.lastErr.Error()
			at := r.failedAt
			if r.suspect {
				at = r.suspectAt
			}
			if !at.IsZero() {
				at = at.UTC()
				rs.LastErrorAt = &at
			}
		}
		r.mu.Unlock()
		if s.HealthCheckRunning {
			st.HealthCheckRunning = true
		}
		if s.LastHealthCheck.After(lastHealth) {
			lastHealth = s.LastHealthCheck
		}
		st.Pools[r.name] = rs
		st.TotalConnections += rs.TotalConnections
		st.AvailableConnections += rs.AvailableConnections
		st.InUseConnections += rs.InUseConnections
		st.TotalQueued += rs.QueueLength
		st.StickySessions += rs.ReservedSessions
		st.Calls += rs.Calls
		st.Errors += rs.Errors
		st.AppErrors += rs.AppErrors
		st.Failovers += rs.Failovers
	}
	sctx, cancel := context.WithTimeout(ctx, statsStoreTimeout)
	defer cancel()
	if n, err := p.store.Len(sctx); err == nil {
		st.UserAssignments = n
	}
	st.UserAssignmentsEvicted = p.UsersEvicted()
	if !lastHealth.IsZero() {
		t := lastHealth.UTC().Truncate(time.Second)
		st.LastHealthCheck = &t
	}
	return st
}
