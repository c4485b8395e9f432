package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

func init() {
	// cluster.redis_url has no flag (a password on a command line is seen
	// by every local user) and its environment variable is a secret.
	settings = append(settings,
		setting{"cluster.lease_ttl", "GRADIOPOOL_CLUSTER_LEASE_TTL", "cluster-lease-ttl", "a dead gateway's leases (its share of the limits) are free again within",
			durSetter(func(c *Config) *time.Duration { return &c.Cluster.LeaseTTL }), kindDuration, DefaultClusterLeaseTTL},
		setting{"cluster.name", "GRADIOPOOL_CLUSTER_NAME", "cluster-name", "Redis key prefix, so that deployments can share one Redis",
			strSetter(func(c *Config) *string { return &c.Cluster.Name }), kindString, DefaultClusterName},
	)
}

// Cluster defaults.
const (
	DefaultClusterName     = "gradiopool"
	DefaultClusterLeaseTTL = 15 * time.Second
	// MinClusterLeaseTTL is the smallest cluster.lease_ttl accepted.
	MinClusterLeaseTTL = 100 * time.Millisecond
)

// ClusterConfig makes several gateways one (package pool/cluster): with a
// Redis URL, each replica's max_connections is the limit across every
// gateway sharing the Redis and the cluster name, user assignments are
// shared, and pool-stats?scope=cluster answers for all of them.
type ClusterConfig struct {
	// RedisURL is redis://host:6379/0 (or rediss:// for TLS). Empty: no
	// cluster. A password must not be written here: GRADIOPOOL_REDIS_URL
	// (environment only, see [Secrets]) carries it and wins over this key.
	RedisURL string `yaml:"redis_url"`
	// LeaseTTL is how long a gateway's leases (and heartbeat) live without
	// a refresh: a dead gateway's share is free again within it. Zero
	// means DefaultClusterLeaseTTL (15 s).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// Name prefixes the Redis keys, so that two deployments can share one
	// Redis. Empty means DefaultClusterName.
	Name string `yaml:"name"`
}

// RedisURL is the Redis URL in effect: GRADIOPOOL_REDIS_URL, else
// cluster.redis_url; empty without a cluster.
func (c Config) RedisURL() string {
	if c.Secrets.RedisURL != "" {
		return c.Secrets.RedisURL
	}
	return c.Cluster.RedisURL
}

func (cc *ClusterConfig) normalize() {
	if cc.Name == "" {
		cc.Name = DefaultClusterName
	}
	if cc.LeaseTTL == 0 {
		cc.LeaseTTL = DefaultClusterLeaseTTL
	}
}

func (cc ClusterConfig) validate() []error {
	var errs []error
	if cc.RedisURL != "" {
		u, err := url.Parse(cc.RedisURL)
		switch {
		case err != nil || (u.Scheme != "redis" && u.Scheme != "rediss"):
			errs = append(errs, errors.New("cluster.redis_url: not a redis:// or rediss:// URL"))
		case u.User != nil:
			if _, has := u.User.Password(); has {
				errs = append(errs, errors.New("cluster.redis_url: holds a password; give the URL with its password in GRADIOPOOL_REDIS_URL (environment) instead"))
			}
		}
	}
	if cc.LeaseTTL < MinClusterLeaseTTL {
		errs = append(errs, fmt.Errorf("cluster.lease_ttl: %v, must be at least %v", cc.LeaseTTL, MinClusterLeaseTTL))
	}
	for _, r := range cc.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			errs = append(errs, fmt.Errorf("cluster.name: %q, use letters, digits and -_. only", cc.Name))
			break
		}
	}
	return errs
}

// LogValue logs the cluster settings; the URL only as host and scheme.
func (cc ClusterConfig) LogValue() slog.Value {
	where := "unset"
	if u, err := url.Parse(cc.RedisURL); err == nil && u.Host != "" {
		where = u.Scheme + "://" + u.Host
	}
	return slog.GroupValue(slog.String("redis_url", where), slog.Duration("lease_ttl", cc.LeaseTTL), slog.String("name", cc.Name))
}

// SetClusterStats makes GET /api/admin/pool-stats?scope=cluster answer
// with stats(ctx) (pool/cluster's view of every gateway). Call it before
// serving. Without it, that scope answers 400.
func (g *Gateway) SetClusterStats(stats func(ctx context.Context) any) { g.clusterStats = stats }

// serveScope answers pool-stats for a scope other than this gateway's
// own; false means the default scope (the seed's JSON of this gateway).
func (g *Gateway) serveScope(w http.ResponseWriter, r *http.Request) bool {
	switch scope := r.URL.Query().Get("scope"); scope {
	case "", "gateway":
		return false
	case "cluster":
		if g.clusterStats == nil {
			writeError(w, &apiError{Status: http.StatusBadRequest, Code: "bad_scope",
				Message: "scope=cluster needs a cluster: set GRADIOPOOL_REDIS_URL or cluster.redis_url"})
			return true
		}
		writeJSON(w, http.StatusOK, g.clusterStats(r.Context()))
		return true
	default:
		writeError(w, &apiError{Status: http.StatusBadRequest, Code: "bad_scope",
			Message: fmt.Sprintf("scope %q: want gateway (default) or cluster", scope)})
		return true
	}
}
