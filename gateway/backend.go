package gateway

import (
	"context"
	"encoding/json"
	"time"
)

// Backend is what the gateway needs of a pool: the real one is a
// *pool.Pool behind [PoolBackend]; tests use fakes.
//
// user is a normalised e-mail or "" (anonymous); endpoint is an api_name
// without the leading slash; args are the call's inputs as raw JSON.
type Backend interface {
	// Predict runs one call to completion.
	Predict(ctx context.Context, user, endpoint string, args []any) (*Result, error)
	// Submit starts one call and returns once the app accepted it. ctx
	// governs the whole call: when it ends first, the call is cancelled at
	// the app and its session goes back to the pool.
	Submit(ctx context.Context, user, endpoint string, args []any) (Call, error)
	// Stats is the pool-stats JSON document (the seed's fields).
	Stats() any
	// Gauges is the per-replica numbers the metrics export.
	Gauges() []ReplicaGauges
	// Ready reports whether at least one replica is usable.
	Ready() bool
}

// Result is the outcome of a completed call.
type Result struct {
	Data    []json.RawMessage
	Replica string
	// Wait is the time from the call's start until the app accepted it:
	// waiting for a free session, connecting when none was warm, and the
	// app's queue/join. 0 when unknown.
	Wait time.Duration
	// Failovers counts the replicas given up on before this one.
	Failovers int
}

// Call is a call in flight.
type Call interface {
	// Replica is the name of the replica running the call.
	Replica() string
	// Events delivers the call's updates; it is closed after the last.
	Events() <-chan Event
	// Wait returns the final outputs or the call's error.
	Wait(ctx context.Context) ([]json.RawMessage, error)
}

// EventKind names a call update; the names are the SSE event names of
// POST /v1/submit.
type EventKind string

// The updates of a call.
const (
	EventQueued   EventKind = "queued"   // Rank, QueueSize, ETA
	EventStarted  EventKind = "started"  // the app began running the call
	EventProgress EventKind = "progress" // Progress
	EventLog      EventKind = "log"      // Log, Level
	EventOutput   EventKind = "output"   // Data: a partial (generator) output
	EventComplete EventKind = "complete" // Data: the final output
	EventError    EventKind = "error"    // Err
)

// Event is one update of a call.
type Event struct {
	Kind      EventKind
	Rank      int             // 0-based position in the app's queue
	QueueSize int             // length of the app's queue
	ETA       float64         // seconds; 0 when unknown
	Progress  json.RawMessage // the app's progress_data list
	Log       string
	Level     string
	Data      []json.RawMessage
	Err       error
}

// ReplicaGauges are one replica's numbers at scrape time.
type ReplicaGauges struct {
	Name       string
	Idle       int
	InUse      int
	Connecting int
	Max        int
	Waiting    int
	Healthy    int
	Unhealthy  int
	// QueueTimeouts is cumulative since start.
	QueueTimeouts uint64
}
