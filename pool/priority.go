package pool

import "github.com/gradiopool/gradiopool/pool/sessionpool"

// Priority is the class of a call waiting for a session of a full replica:
// higher classes are served first, FIFO within a class, and a waiter is
// promoted once it has waited Config.PriorityMaxWait, so that low-priority
// calls are delayed but never starved. Config.QueueTimeout applies to every
// class. Pass it in CallOptions; the gateway sets it from the
// X-Gradiopool-Priority header.
type Priority = sessionpool.Priority

// Priority classes; the zero value is PriorityNormal.
const (
	PriorityLow    = sessionpool.PriorityLow
	PriorityNormal = sessionpool.PriorityNormal
	PriorityHigh   = sessionpool.PriorityHigh
)

// ParsePriority parses "high", "normal" or "low" (any case); "" is
// PriorityNormal.
func ParsePriority(s string) (Priority, error) { return sessionpool.ParsePriority(s) }
