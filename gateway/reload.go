package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
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
		g.history.note(eventReloadFailed, "", "configuration not loaded, nothing changed", err)
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
	secrets := *g.secrets.Load()
	for _, c := range []struct {
		env     string
		changed bool
		live    bool
	}{
		{"HF_TOKEN", was.HFToken != now.HFToken, false},
		// Removing the admin token would open the admin routes: only a
		// restart does that.
		{"GRADIOPOOL_ADMIN_TOKEN", was.AdminToken != now.AdminToken, now.AdminToken != ""},
		// The front door was told at start whether callers' bearer
		// tokens are gateway keys (never forwarded) or their own: keys
		// may be rotated, not turned on or off, while it runs.
		{"GRADIOPOOL_API_KEYS", !slices.Equal(was.APIKeys, now.APIKeys), g.front == nil || (len(was.APIKeys) > 0) == (len(now.APIKeys) > 0)},
		{"GRADIOPOOL_HASH_KEY", was.HashKey != now.HashKey, false},
		{"GRADIOPOOL_REDIS_URL", was.RedisURL != now.RedisURL, false},
	} {
		switch {
		case !c.changed:
		case !c.live:
			out.Refused = append(out.Refused, c.env)
		default:
			out.Applied = append(out.Applied, c.env)
			if c.env == "GRADIOPOOL_ADMIN_TOKEN" {
				secrets.adminToken, applied.Secrets.AdminToken = now.AdminToken, now.AdminToken
			} else {
				secrets.apiKeys, applied.Secrets.APIKeys = now.APIKeys, now.APIKeys
			}
		}
	}
	if len(out.Applied) > 0 && g.pool != nil {
		ap := applied.Pool
		pc := pool.Config{Replicas: ap.Replicas, MinConnections: ap.MinConnections, MaxConnections: ap.MaxConnections,
			MaxWaiters: ap.MaxWaiters, QueueTimeout: ap.QueueTimeout, IdleTimeout: ap.IdleTimeout}
		if err := g.pool.Reconfigure(pc); err != nil {
			g.log.Error("reload: the pool refused the configuration, nothing changed", slog.Any("error", err))
			g.history.note(eventReloadFailed, "", "the pool refused the configuration, nothing changed", err)
			return Reloaded{}, fmt.Errorf("reload: %w", err)
		}
		if g.poolBackend != nil {
			g.poolBackend.max.Store(int64(applied.Pool.MaxConnections))
		}
		g.history.setMax(applied.Pool.WithDefaults().MaxConnections)
		g.userCalls.setMax(perUserLimit(applied), false)
	}
	if g.front != nil {
		g.front.Reconfigure(frontDoorLive(applied))
	}
	rl.running = applied
	g.secrets.Store(&secrets)
	g.clientCalls.setMax(perClientLimit(applied))
	if len(out.Refused) > 0 {
		g.log.Warn("reload: these settings cannot change while the gateway runs; restart to apply them",
			slog.Any("refused", out.Refused))
	}
	out.Replicas = rl.running.Pool.Replicas
	if g.pool != nil {
		out.Replicas = g.pool.Replicas()
	}
	g.log.Info("configuration reloaded", slog.Any("applied", out.Applied), slog.Any("replicas", out.Replicas))
	g.history.note(eventReload, "", reloadSummary(out), nil)
	return out, nil
}

// The dashboard's event kinds for reloads.
const (
	eventReload       = "reload"
	eventReloadFailed = "reload_failed"
)

// reloadSummary is a reload's line in the dashboard's event list: key
// names only (secrets by their variable's name, never a value).
func reloadSummary(out Reloaded) string {
	s := "applied: none"
	if len(out.Applied) > 0 {
		s = "applied: " + strings.Join(out.Applied, ", ")
	}
	if len(out.Refused) > 0 {
		s += "; refused (restart to apply): " + strings.Join(out.Refused, ", ")
	}
	return s
}

// liveSecrets are the secrets a reload may change.
type liveSecrets struct {
	adminToken string
	apiKeys    []string
}

// adminToken is the admin token in effect ("" none: the admin routes are
// open).
func (g *Gateway) adminToken() string { return g.secrets.Load().adminToken }

// apiKeys are the API keys in effect (none: the call routes are open).
func (g *Gateway) apiKeys() []string { return g.secrets.Load().apiKeys }

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
