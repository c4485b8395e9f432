package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// Backend is what the gateway needs of a pool: the real one is a
// *pool.Pool behind [PoolBackend]; tests use fakes.
//
// user is a normalised e-mail or "" (anonymous); endpoint is an api_name
// without the leading slash; args are the call's inputs as raw JSON.
type Backend interface {
	// Predict runs one call to completion.
	// opts are the call's own options (its priority class).
	Predict(ctx context.Context, user string, opts pool.CallOptions, endpoint string, args []any) (*Result, error)
	// Submit starts one call and returns once the app accepted it. ctx
	// governs the whole call: when it ends first, the call is cancelled at
	// the app and its session goes back to the pool.
	Submit(ctx context.Context, user string, opts pool.CallOptions, endpoint string, args []any) (Call, error)
	// Stats is the pool-stats document (the seed's fields); ctx bounds the
	// network I/O a shared assignment store may need.
	Stats(ctx context.Context) pool.Stats
	// Gauges is the per-replica numbers the metrics export.
	Gauges(ctx context.Context) []ReplicaGauges
	// UserTag is how logs name user (a normalised e-mail): the pool's own
	// tag, so the gateway's and the pool's lines of one call match.
	UserTag(user string) string
	// Ready reports whether at least one replica is usable.
	Ready() bool
	// Pool is the pool behind the backend, which the Gradio front door
	// speaks through; nil when there is none (the front door is then off).
	Pool() *pool.Pool
}

// Result is the outcome of a completed call.
type Result struct {
	Data    []json.RawMessage
	Replica string
	// Wait is how long the call waited for a session: in the replicas'
	// FIFO queues, or for one to connect when none was warm. 0 when
	// unknown.
	Wait time.Duration
	// Failovers counts the replicas given up on before this one.
	Failovers int
	// release gives back what Data holds of the event budget (the pool
	// backend's; nil: nothing), once the answer is written.
	release func()
}

// Call is a call in flight.
type Call interface {
	// Replica is the name of the replica running the call.
	Replica() string
	// Events delivers the call's updates as the Gradio client reports
	// them (queued, started, progress, log, each partial output; the final
	// result comes from Wait); it is closed after the last. The gateway
	// reads it to the end. It is the client's own channel, not a copy fed
	// by a goroutine: each call in flight costs one goroutine less.
	Events() <-chan gradio.Event
	// Waited is how long the call waited for a session (see Result.Wait).
	Waited() time.Duration
	// Wait returns the final outputs or the call's error.
	Wait(ctx context.Context) ([]json.RawMessage, error)
}

// releaseCall gives back what c's result holds of the event budget
// (pool.Call.Release), for a Call that has any: once its answer is
// written, or its result kept elsewhere.
func releaseCall(c any) {
	if r, ok := c.(interface{ Release() }); ok {
		r.Release()
	}
}

// ReplicaGauges are one replica's numbers at scrape time.
type ReplicaGauges struct {
	Name string
	// State is the replica's state as the dashboard shows it (pool
	// states, or "sleeping"); "" when unknown (no state gauges).
	State      string
	Idle       int
	InUse      int
	Connecting int
	Max        int
	Waiting    int
	Healthy    int
	Unhealthy  int
	// QueueTimeouts is cumulative since start.
	QueueTimeouts uint64
	// SpaceQueue is the app's own queue as it last reported it (less what
	// it worked off since); SpaceETA the seconds a new call is expected to
	// take there (see pool.ReplicaStats).
	SpaceQueue int
	SpaceETA   float64
	// EjectedSecondsLeft is the back-off left of an ejection;
	// PermanentFailure a connect failure that cannot pass by itself (no
	// such Space, a token refused), retried slowly.
	EjectedSecondsLeft float64
	PermanentFailure   bool
	// Operator is the operator's control of the replica
	// (pool.ReplicaStats.Operator: enabled, draining, drained, disabled);
	// "" when unknown (no operator gauges).
	Operator string
}
