package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/pool/cluster"
)

// Cluster defaults.
const (
	defaultClusterName     = "gradiopool"
	defaultClusterLeaseTTL = 15 * time.Second
	// minClusterLeaseTTL is the smallest cluster.lease_ttl accepted.
	minClusterLeaseTTL = 100 * time.Millisecond
)

// ClusterConfig makes several gateways one (package pool/cluster): with a
// Redis URL, each replica's max_connections is the limit across every
// gateway sharing the Redis and the cluster name, user assignments are
// shared, and pool-stats?scope=cluster answers for all of them.
type ClusterConfig struct {
	// RedisURL is redis://host:6379/0 (or rediss:// for TLS). Empty: no
	// cluster. A password must not be written here: GRADIOPOOL_REDIS_URL
	// (environment only, see [Secrets]) carries it and wins over this key.
	RedisURL string
	// AdvertiseURL is the URL the other gateways reach this one at: the
	// requests of a caller session (or a sticky user) this gateway owns
	// are forwarded there. Empty: http:// and the listen address, or this
	// host's first non-loopback address when it listens on all.
	AdvertiseURL string
	// LeaseTTL is how long a gateway's leases (and heartbeat) live without
	// a refresh: a dead gateway's share is free again within it. Zero
	// means defaultClusterLeaseTTL (15 s).
	LeaseTTL time.Duration
	// Name prefixes the Redis keys, so that two deployments can share one
	// Redis. Empty means defaultClusterName.
	Name string
	// OnRedisLoss is fail_open (serve on local shares, the default) or
	// fail_closed (refuse new calls until Redis answers).
	OnRedisLoss string
	// Gateways is how many gateways may run at once: while Redis is lost
	// each limit's local share is divided by at least this many. Zero: by
	// the gateways last seen alive.
	Gateways int
	// StartDegraded starts the gateway while Redis does not answer (it
	// joins when Redis does); it needs Gateways.
	StartDegraded bool
	// WaitReplicas is how many replicas must acknowledge a grant before it
	// is used, so that a failover cannot lose it (Redis replicates
	// asynchronously); 0 (the default): 1 for Sentinel and Cluster URLs,
	// none for a standalone one; -1: none.
	WaitReplicas int
	// TLS for rediss:// URLs: a private CA, a client certificate and key,
	// or (tests only) no verification.
	TLSCAFile             string
	TLSCertFile           string
	TLSKeyFile            string
	TLSInsecureSkipVerify bool
}

// tlsFiles are the TLS settings in pool/cluster's terms.
func (cc ClusterConfig) tlsFiles() cluster.TLSFiles {
	return cluster.TLSFiles{CAFile: cc.TLSCAFile, CertFile: cc.TLSCertFile, KeyFile: cc.TLSKeyFile, InsecureSkipVerify: cc.TLSInsecureSkipVerify}
}

// RedisURL is the Redis URL in effect: GRADIOPOOL_REDIS_URL, else
// cluster.redis_url; empty without a cluster.
func (c Config) RedisURL() string {
	if c.Secrets.RedisURL != "" {
		return c.Secrets.RedisURL
	}
	return c.Cluster.RedisURL
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
	if _, err := cluster.ParseLossPolicy(cc.OnRedisLoss); err != nil {
		errs = append(errs, fmt.Errorf("cluster.on_redis_loss: %q, want fail_open or fail_closed", cc.OnRedisLoss))
	}
	if cc.WaitReplicas < -1 {
		errs = append(errs, fmt.Errorf("cluster.redis_wait_replicas: %d, want -1 (none), 0 (by topology) or more", cc.WaitReplicas))
	}
	if cc.Gateways < 0 {
		errs = append(errs, fmt.Errorf("cluster.gateways: %d, must not be negative", cc.Gateways))
	}
	if cc.StartDegraded && cc.Gateways < 1 {
		errs = append(errs, errors.New("cluster.start_degraded: needs cluster.gateways (how many gateways may run at once), so that a gateway that never saw the others takes only its share"))
	}
	if (cc.TLSCertFile == "") != (cc.TLSKeyFile == "") {
		errs = append(errs, errors.New("cluster.redis_tls_cert_file and cluster.redis_tls_key_file: give both or neither"))
	}
	if cc.AdvertiseURL != "" {
		if u, err := url.Parse(cc.AdvertiseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			errs = append(errs, fmt.Errorf("cluster.advertise_url: %q, want http://host:port or https://host:port", cc.AdvertiseURL))
		}
	}
	if cc.LeaseTTL < minClusterLeaseTTL {
		errs = append(errs, fmt.Errorf("cluster.lease_ttl: %v, must be at least %v", cc.LeaseTTL, minClusterLeaseTTL))
	}
	for _, r := range cc.Name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			errs = append(errs, fmt.Errorf("cluster.name: %q, use letters, digits and -_. only", cc.Name))
			break
		}
	}
	return errs
}

// setClusterStats makes GET /api/admin/pool-stats?scope=cluster answer
// with stats(ctx) (pool/cluster's view of every gateway); Open sets it for
// a cluster, before serving. Without it, that scope answers 400.
func (g *Gateway) setClusterStats(stats func(ctx context.Context) any) { g.clusterStats = stats }

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

// advertiseURL is the URL the other gateways reach this one at: the
// configured one, else http:// and the listen address, with this host's
// first non-loopback address for an address that listens on all.
func (c Config) advertiseURL() string {
	if c.Cluster.AdvertiseURL != "" {
		return strings.TrimRight(c.Cluster.AdvertiseURL, "/")
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return "http://" + c.Listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = firstHostAddr()
	}
	return "http://" + net.JoinHostPort(host, port)
}

// firstHostAddr is this host's first non-loopback unicast address (a
// pod's address in Kubernetes), else 127.0.0.1.
func firstHostAddr() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.IsGlobalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
