package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

// ControlAnswer is the answer of POST /api/admin/replicas/{name}/{action}.
type ControlAnswer struct {
	Replica string `json:"replica"`
	// Control is what the operator asked: enabled, drain or disable.
	Control string `json:"control"`
	// Operator is the replica's state now (pool.ReplicaStats.Operator):
	// enabled, draining, drained or disabled.
	Operator string `json:"operator"`
	// Changed is false when the replica already had this control.
	Changed bool `json:"changed"`
	// Cluster: the control was stored in Redis, so every gateway of the
	// cluster applies it (within controlPollInterval).
	Cluster bool `json:"cluster"`
}

// controlPollInterval is how often a gateway of a cluster reads the
// replica controls other gateways set.
const controlPollInterval = time.Second

// handleReplicaControl is POST /api/admin/replicas/{name}/{action}, action
// drain, disable or enable: an operator's hold on one replica (see
// pool.Control). In a cluster it is stored in Redis first, and refused
// (nothing changed) when Redis does not take it.
func (g *Gateway) handleReplicaControl(w http.ResponseWriter, r *http.Request) {
	if _, hasBearer := bearer(r); !hasBearer && crossOrigin.Check(r) != nil {
		// The dashboard's buttons send the login cookie: a cross-site
		// form must not drain a replica with it.
		writeError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: "cross-site request refused"})
		return
	}
	p := g.backend.Pool()
	if p == nil {
		writeError(w, &apiError{Status: http.StatusNotImplemented, Code: "controls_unavailable",
			Message: "this gateway's backend is not a pool of replicas"})
		return
	}
	name, action := r.PathValue("name"), r.PathValue("action")
	c, err := pool.ParseControl(action)
	if err != nil || action == string(pool.ControlEnabled) {
		writeError(w, &apiError{Status: http.StatusNotFound, Code: "not_found",
			Message: "no such action " + clip(action, 32) + ": use drain, disable or enable"})
		return
	}
	known := false
	for _, n := range p.Replicas() {
		known = known || n == name
	}
	if !known {
		writeError(w, &apiError{Status: http.StatusNotFound, Code: "unknown_replica",
			Message: "no replica named " + clip(name, maxEcho) + " (GET /api/admin/pool-stats lists them)"})
		return
	}
	out := ControlAnswer{Replica: name, Control: string(c)}
	if m := g.member; m != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		err := m.controls.Set(ctx, name, string(c))
		cancel()
		if err != nil {
			m.coord.RedisFailed(err)
			g.log.Error("replica control not stored in Redis: nothing changed", slog.String("replica", name), slog.Any("error", err))
			writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: "cluster_unavailable", RetryAfter: 1,
				Message: "Redis did not take the control, so the other gateways would not apply it; nothing changed"})
			return
		}
		out.Cluster = true
	}
	out.Changed, err = p.SetControl(name, c)
	if errors.Is(err, pool.ErrUnknownReplica) { // removed by a reload meanwhile
		writeError(w, &apiError{Status: http.StatusNotFound, Code: "unknown_replica", Message: "no replica named " + clip(name, maxEcho)})
		return
	}
	if err != nil {
		writeError(w, &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()})
		return
	}
	out.Operator = p.Stats(r.Context()).Pools[name].Operator
	g.log.Info("replica control", slog.String("replica", name), slog.String("control", string(c)),
		slog.Bool("changed", out.Changed), slog.Bool("cluster", out.Cluster))
	writeJSON(w, http.StatusOK, out)
}

// syncControls applies the controls stored in Redis to p every
// controlPollInterval until stop is closed: a replica another gateway
// drained or disabled is held here too, one it enabled is released. While
// Redis is lost the controls in effect stay.
func (m *clusterMember) syncControls(p *pool.Pool, stop <-chan struct{}, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		m.applyControls(p)
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// applyControls reads the shared controls once and applies the changes.
func (m *clusterMember) applyControls(p *pool.Pool) {
	if !m.coord.RedisUp() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	shared, err := m.controls.All(ctx)
	cancel()
	if err != nil {
		m.coord.RedisFailed(err)
		return
	}
	local := p.Controls()
	for _, name := range p.Replicas() {
		want := pool.Control(shared[name])
		if want == "" {
			want = pool.ControlEnabled
		}
		have := local[name]
		if have == "" {
			have = pool.ControlEnabled
		}
		if want != have {
			_, _ = p.SetControl(name, want) // an unknown value is refused: ignored
		}
	}
}
