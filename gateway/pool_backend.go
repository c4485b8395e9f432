package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// PoolBackend adapts a *pool.Pool to [Backend]. maxConnections is the
// per-replica maximum reported by the gradiopool_sessions_max metric.
func PoolBackend(p *pool.Pool, maxConnections int) Backend {
	return newPoolBackend(p, maxConnections)
}

func newPoolBackend(p *pool.Pool, maxConnections int) *poolBackend {
	b := &poolBackend{p: p}
	b.max.Store(int64(maxConnections))
	return b
}

type poolBackend struct {
	p   *pool.Pool
	max atomic.Int64 // a reload may change it
}

// Predict is pool.Predict spelled as Submit + Wait, so that the time the
// call waited for a session is known (Result.Wait).
func (b *poolBackend) Predict(ctx context.Context, user string, opts pool.CallOptions, endpoint string, args []any) (*Result, error) {
	opts.Quiet = true // its events are not read
	c, err := b.p.SubmitWith(ctx, user, opts, endpoint, args...)
	if err != nil {
		return nil, err
	}
	wait := c.Waited()
	data, err := c.Wait(ctx)
	// The session is back in the pool before the answer, unless the
	// caller's deadline passed: it then comes back when the app's job is
	// cancelled, which a hung replica can delay past that deadline.
	if ctx.Err() == nil {
		<-c.Done()
	}
	if err != nil {
		c.Release()
		return nil, err
	}
	return &Result{Data: data, Replica: c.Replica(), Wait: wait, Failovers: max(c.Attempts()-1, 0), release: c.Release}, nil
}

func (b *poolBackend) Submit(ctx context.Context, user string, opts pool.CallOptions, endpoint string, args []any) (Call, error) {
	c, err := b.p.SubmitWith(ctx, user, opts, endpoint, args...)
	if err != nil {
		return nil, err
	}
	return &poolCall{c: c}, nil
}

func (b *poolBackend) Stats(ctx context.Context) pool.Stats { return b.p.Stats(ctx) }

func (b *poolBackend) UserTag(user string) string { return b.p.UserTag(user) }

func (b *poolBackend) Ready() bool { return b.p.Ready() }

func (b *poolBackend) Gauges(ctx context.Context) []ReplicaGauges {
	st := b.p.Stats(ctx)
	names := make([]string, 0, len(st.Pools))
	for n := range st.Pools {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]ReplicaGauges, 0, len(names))
	for _, n := range names {
		r := st.Pools[n]
		out = append(out, ReplicaGauges{
			Name: n, State: displayState(r), Idle: r.AvailableConnections, InUse: r.InUseConnections, Connecting: r.Connecting,
			Max: int(b.max.Load()), Waiting: r.QueueLength, Healthy: r.HealthyConnections, Unhealthy: r.UnhealthyConnections,
			QueueTimeouts: r.QueueTimeouts, SpaceQueue: r.SpaceQueue, SpaceETA: r.SpaceETA,
			EjectedSecondsLeft: r.EjectedSecondsLeft, PermanentFailure: r.PermanentFailure, Operator: r.Operator,
		})
	}
	return out
}

// poolCall is a pool call seen as a gateway Call.
type poolCall struct {
	c *pool.Call
}

func (c *poolCall) Replica() string             { return c.c.Replica() }
func (c *poolCall) Waited() time.Duration       { return c.c.Waited() }
func (c *poolCall) Events() <-chan gradio.Event { return c.c.Events() }
func (c *poolCall) Release()                    { c.c.Release() }
func (c *poolCall) Wait(ctx context.Context) ([]json.RawMessage, error) {
	out, err := c.c.Wait(ctx)
	if err == nil {
		// The session is released right after the job ends; wait for it so
		// that stats read after the answer show it idle again.
		select {
		case <-c.c.Done():
		case <-ctx.Done():
		}
	}
	return out, err
}

// poolError maps the pool's own errors; nil means not a pool error.
// allHeld reports whether every replica was skipped because an operator
// drained or disabled it.
func allHeld(all *pool.AllReplicasFailedError) bool {
	for _, c := range all.Causes {
		if !errors.Is(c, pool.ErrHeld) {
			return false
		}
	}
	return len(all.Causes) > 0
}

func poolError(err error) *apiError {
	var all *pool.AllReplicasFailedError
	if errors.As(err, &all) {
		if pool.IsOverloaded(err) {
			return &apiError{Status: http.StatusServiceUnavailable, Code: "queue_full", Message: all.Error(), RetryAfter: 5}
		}
		if pool.IsParked(err) { // autoscale: no awake replica took it, a paused one did not wake within autoscale.wake_timeout
			return &apiError{Status: http.StatusServiceUnavailable, Code: "replicas_parked",
				Message: "no awake replica could take the call and the replicas paused to save cost did not wake in time; retry shortly", RetryAfter: 30}
		}
		if allHeld(all) { // an operator's choice, not a failure
			return &apiError{Status: http.StatusServiceUnavailable, Code: "replica_unavailable", Message: all.Error(), RetryAfter: 10}
		}
		return &apiError{Status: http.StatusBadGateway, Code: "all_replicas_failed", Message: all.Error()}
	}
	switch {
	case errors.Is(err, pool.ErrQueueTimeout):
		return &apiError{Status: http.StatusServiceUnavailable, Code: "queue_timeout", Message: "no session became free within the queue timeout: " + err.Error(), RetryAfter: 5}
	case errors.Is(err, pool.ErrQueueFull):
		return &apiError{Status: http.StatusServiceUnavailable, Code: "queue_full", Message: "too many callers are waiting: " + err.Error(), RetryAfter: 1}
	case errors.Is(err, pool.ErrClosed):
		return &apiError{Status: http.StatusServiceUnavailable, Code: "closed", Message: err.Error(), RetryAfter: 1}
	}
	return nil
}

// PoolConfig is the pool's configuration of c with the defaults applied
// (c.Pool, see [Config.Normalize]) and what only the gateway knows added:
// the HF token and the Hub URL as client options (after opts), the hash
// key, logger (nil: none) and metrics (nil: none) as the pool's event hook.
func (c Config) PoolConfig(logger *slog.Logger, metrics *Metrics, opts ...gradio.Option) pool.Config {
	c.Normalize()
	pc := c.Pool
	opts = append(pc.ClientOptions[:len(pc.ClientOptions):len(pc.ClientOptions)], opts...)
	if c.Secrets.HFToken != "" {
		opts = append(opts, gradio.WithHFToken(c.Secrets.HFToken))
	}
	if c.HubURL != "" {
		opts = append(opts, gradio.WithHubURL(strings.TrimRight(c.HubURL, "/")))
	}
	if c.UpstreamKeepAlive != 0 {
		opts = append(opts, gradio.WithKeepAlive(c.UpstreamKeepAlive))
	}
	// One budget per gateway, shared by every replica's client (and the
	// front door's relays, which read through them): what a hostile replica
	// makes it hold is bounded in total, not per call.
	budget := gradio.NewEventBudget(c.UpstreamEventBytes)
	opts = append(opts, gradio.WithEventBudget(budget))
	pc.ClientOptions = opts
	if logger != nil {
		pc.Logger = logger
	}
	if c.Secrets.HashKey != "" {
		pc.HashKey = []byte(c.Secrets.HashKey)
	}
	if metrics != nil {
		metrics.watchEventBudget(budget)
		// The caller's own hook (c.Pool.OnEvent) still gets every event.
		own := pc.OnEvent
		pc.OnEvent = func(e pool.Event) {
			metrics.onPoolEvent(e)
			if own != nil {
				own(e)
			}
		}
	}
	return pc
}

// onPoolEvent feeds the pool's events to the metrics (pool.Config.OnEvent).
func (m *Metrics) onPoolEvent(e pool.Event) {
	m.hooks.onPool(e)
	switch e.Kind {
	case pool.EventConnected:
		m.observeCreate(e.Replica, e.Duration, nil)
	case pool.EventConnectFailed:
		m.observeCreate(e.Replica, e.Duration, e.Err)
	case pool.EventSessionCreated:
		m.created.WithLabelValues(e.Replica).Inc()
	case pool.EventSessionDestroyed:
		reason := e.Reason
		if reason == "" {
			reason = "other"
		}
		m.destroyed.WithLabelValues(e.Replica, reason).Inc()
	case pool.EventFailover:
		m.observeFailover(e.Route, e.Replica, e.Endpoint)
	case pool.EventStateLost:
		m.stateLost.WithLabelValues(e.Previous).Inc()
	}
}
