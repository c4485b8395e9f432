package pool

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// Errors of the pool. Queue errors come from the replica's session pool and
// are re-exported so that callers need not import package sessionpool.
var (
	// ErrClosed: the Pool was closed.
	ErrClosed = errors.New("pool: closed")
	// ErrQueueTimeout: no session of the chosen replica became free within
	// Config.QueueTimeout (HTTP 503/429 with Retry-After in the gateway).
	ErrQueueTimeout = sessionpool.ErrQueueTimeout
	// ErrQueueFull: the replica's waiter list (Config.MaxWaiters) was full.
	ErrQueueFull = sessionpool.ErrQueueFull
	// errEjected is wrapped by the cause of a replica skipped because it
	// failed recently and its back-off has not passed (or it is being probed).
	errEjected = errors.New("pool: replica ejected after failures")
)

// ReplicaError is an error of one replica; Replica is its name.
type ReplicaError struct {
	Replica string
	Err     error
}

func (e *ReplicaError) Error() string { return "replica " + e.Replica + ": " + e.Err.Error() }
func (e *ReplicaError) Unwrap() error { return e.Err }

// AllReplicasFailedError reports that no replica could serve a call. Causes
// has one entry per replica tried or skipped, in the order they were
// considered. It unwraps to every cause, so errors.Is(err, ErrQueueFull) or
// errors.As(err, &spaceErr) look through it.
type AllReplicasFailedError struct {
	Causes []*ReplicaError
}

func (e *AllReplicasFailedError) Error() string {
	var b strings.Builder
	b.WriteString("pool: all replicas failed")
	for i, c := range e.Causes {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(c.Replica)
		b.WriteString(": ")
		b.WriteString(c.Err.Error())
	}
	return b.String()
}

func (e *AllReplicasFailedError) Unwrap() []error {
	errs := make([]error, len(e.Causes))
	for i, c := range e.Causes {
		errs[i] = c
	}
	return errs
}

// ejectedError is the cause recorded for a replica skipped while ejected,
// or (suspectSince set) skipped as hung. One type for both: each wraps
// errEjected and the replica's last error alike.
type ejectedError struct {
	until        time.Time
	last         error
	trial        bool // half-open: its trial calls are out, waiting for their verdict
	permanent    bool
	suspectSince time.Time // when it was found hung; zero when ejected
}

func (e *ejectedError) suspect() bool { return !e.suspectSince.IsZero() }

func (e *ejectedError) Error() string {
	if e.suspect() {
		s := fmt.Sprintf("suspect (hung) since %s", e.suspectSince.UTC().Format(time.RFC3339))
		if e.last != nil {
			s += ": " + e.last.Error()
		}
		return s
	}
	s := "ejected"
	switch {
	case e.trial:
		s += " (half-open: trial calls in flight)"
	case e.permanent:
		s += fmt.Sprintf(" until %s (permanent failure, retried slowly)", e.until.UTC().Format(time.RFC3339))
	case !e.until.IsZero():
		s += fmt.Sprintf(" until %s", e.until.UTC().Format(time.RFC3339))
	default:
		s += " (being probed)"
	}
	if e.last != nil {
		s += " after: " + e.last.Error()
	}
	return s
}

func (e *ejectedError) Unwrap() []error {
	if e.last == nil {
		return []error{errEjected}
	}
	return []error{errEjected, e.last}
}
