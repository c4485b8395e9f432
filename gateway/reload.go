package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"sync"

	"github.com/gradiopool/gradiopool/pool"
)

// Reloaded is what a configuration reload did (the answer of
// POST /api/admin/reload).
type Reloaded struct {
	// Applied are the keys whose new value is in effect.
	Applied []string `json:"applied"`
	// Refused are the keys that changed but cannot change while the
	// gateway runs (listen address, Redis, secrets, ...): they keep their
	// running value until a restart.
	Refused []string `json:"refused"`
	// Replicas are the replicas serving after the reload.
	Replicas []string `json:"replicas"`
}

// reloader is the state of live reloads: where the configuration comes
// from and what is running.
type reloader struct {
	mu      sync.Mutex // one reload at a time
	load    func() (Config, error)
	running Config // what is in effect: the start configuration plus the applied keys
}

// SetConfigLoader sets where [Gateway.Reload] reads the configuration:
// `gradiopool serve` passes its own loading (file, environment, flags:
// the same path as at start). Without one, Reload fails.
func (g *Gateway) SetConfigLoader(load func() (Config, error)) {
	g.reload.mu.Lock()
	defer g.reload.mu.Unlock()
	g.reload.load = load
}

// errNoLoader: the gateway was not given a configuration source.
var errNoLoader = errors.New("reload: the gateway has no configuration source (it reloads when run by gradiopool serve)")

// Reload reads the configuration again and applies in place what can
// change while calls run: the replica list and the pool's sizes and
// time-outs (keys marked live in the settings table; see
// [pool.Pool.Reconfigure]). Keys that changed but cannot change live are
// refused with one log line naming them, and keep their running value.
// Calls in flight are never cut. A configuration that does not load or
// validate changes nothing and is returned as the error.
func (g *Gateway) Reload() (Reloaded, error) {
	rl := &g.reload
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.load == nil {
		return Reloaded{}, errNoLoader
	}
	next, err := rl.load()
	if err != nil {
		g.log.Error("reload: configuration not loaded, nothing changed", slog.Any("error", err))
		return Reloaded{}, fmt.Errorf("reload: %w", err)
	}
	next.Normalize()
	out := Reloaded{Applied: []string{}, Refused: []string{}}
	applied := rl.running
	for _, s := range settings {
		was, now := reflect.ValueOf(s.field(&rl.running)).Elem(), reflect.ValueOf(s.field(&next)).Elem()
		if reflect.DeepEqual(was.Interface(), now.Interface()) {
			continue
		}
		if g.liveKey(s) {
			out.Applied = append(out.Applied, s.key)
			reflect.ValueOf(s.field(&applied)).Elem().Set(now)
		} else {
			out.Refused = append(out.Refused, s.key)
		}
	}
	// Secrets are compared by name only: their values never reach a log.
	was, now := rl.running.Secrets, next.Secrets
	for _, c := range []struct {
		env     string
		changed bool
	}{
		{"HF_TOKEN", was.HFToken != now.HFToken},
		{"GRADIOPOOL_ADMIN_TOKEN", was.AdminToken != now.AdminToken},
		{"GRADIOPOOL_API_KEYS", !slices.Equal(was.APIKeys, now.APIKeys)},
		{"GRADIOPOOL_HASH_KEY", was.HashKey != now.HashKey},
		{"GRADIOPOOL_REDIS_URL", was.RedisURL != now.RedisURL},
	} {
		if c.changed {
			out.Refused = append(out.Refused, c.env)
		}
	}
	if len(out.Applied) > 0 {
		ap := applied.Pool
		pc := pool.Config{Replicas: ap.Replicas, MinConnections: ap.MinConnections, MaxConnections: ap.MaxConnections,
			MaxWaiters: ap.MaxWaiters, QueueTimeout: ap.QueueTimeout, IdleTimeout: ap.IdleTimeout}
		if err := g.pool.Reconfigure(pc); err != nil {
			g.log.Error("reload: the pool refused the configuration, nothing changed", slog.Any("error", err))
			return Reloaded{}, fmt.Errorf("reload: %w", err)
		}
		rl.running = applied
		if g.poolBackend != nil {
			g.poolBackend.max.Store(int64(applied.Pool.MaxConnections))
		}
		g.clientCalls.setMax(perClientLimit(applied))
		g.userCalls.setMax(perUserLimit(applied), false)
	}
	if len(out.Refused) > 0 {
		g.log.Warn("reload: these settings cannot change while the gateway runs; restart to apply them",
			slog.Any("refused", out.Refused))
	}
	out.Replicas = rl.running.Pool.Replicas
	if g.pool != nil {
		out.Replicas = g.pool.Replicas()
	}
	g.log.Info("configuration reloaded", slog.Any("applied", out.Applied), slog.Any("replicas", out.Replicas))
	return out, nil
}

// liveKey reports whether s can change while the gateway runs: a key
// marked live in the table, over a pool this gateway opened. With a
// cluster, the replica list and the limits are shared through Redis by
// every gateway (each one's share is computed at start), so they are not.
func (g *Gateway) liveKey(s setting) bool {
	if !s.live || g.pool == nil {
		return false
	}
	if g.member != nil {
		switch s.key {
		case "replicas", "pool.max_connections", "pool.max_waiters":
			return false
		}
	}
	return true
}

// handleReload is POST /api/admin/reload: [Gateway.Reload], answered with
// what changed and what was refused.
func (g *Gateway) handleReload(w http.ResponseWriter, r *http.Request) {
	out, err := g.Reload()
	switch {
	case errors.Is(err, errNoLoader):
		writeError(w, &apiError{Status: http.StatusNotImplemented, Code: "reload_unavailable", Message: err.Error()})
	case err != nil:
		writeError(w, &apiError{Status: http.StatusUnprocessableEntity, Code: "reload_failed",
			Message: clip(err.Error(), 1000) + "; nothing changed"})
	default:
		writeJSON(w, http.StatusOK, out)
	}
}
