package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// TLSFiles are the TLS settings of [NewClient] beyond the rediss:// scheme.
type TLSFiles struct {
	// CAFile is a PEM file of the certificate authorities to trust
	// (a private CA); empty: the system's.
	CAFile string
	// CertFile and KeyFile are the client certificate and key (PEM) for
	// servers that ask for one (tls-auth-clients); both or neither.
	CertFile, KeyFile string
	// InsecureSkipVerify accepts any server certificate: for tests only,
	// it gives up the server's identity.
	InsecureSkipVerify bool
}

func (t TLSFiles) set() bool {
	return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.InsecureSkipVerify
}

// ErrBadURL is NewClient's error for a URL that is not redis:// or
// rediss:// with a host.
var ErrBadURL = errors.New("cluster: the Redis URL is not a redis:// or rediss:// URL")

// Topology names a client's kind of deployment.
type Topology string

// Topologies of [NewClient].
const (
	Standalone Topology = "standalone"
	Sentinel   Topology = "sentinel"
	Cluster    Topology = "cluster"
)

// NewClient builds the Redis client for rawURL, one setting for the three
// topologies (go-redis' own URL parameters, e.g. dial_timeout, apply to
// each):
//
//	redis://[user:password@]host:6379[/db]                      standalone
//	redis://[user:password@]sentinel1:26379?master_name=NAME&addr=sentinel2:26379&addr=...
//	                                                            Sentinel: the primary NAME found through these Sentinels
//	                                                            (sentinel_username / sentinel_password if they need AUTH)
//	redis://[user:password@]node1:6379?addr=node2:6379&addr=... Cluster: seed nodes (or ?cluster=true with one)
//
// rediss:// is TLS, with tf for a private CA, a client certificate or
// skipping verification. Every client has ContextTimeoutEnabled, so that
// the Coordinator's time-outs cut socket reads: a hung Redis is noticed
// within them. Errors never quote the URL (it may hold a password).
func NewClient(rawURL string, tf TLSFiles) (redis.UniversalClient, Topology, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		return nil, "", ErrBadURL
	}
	q := u.Query()
	clusterMode := q.Get("cluster") == "true" || q.Get("cluster") == "1"
	sentUser, sentPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	for _, k := range []string{"cluster", "sentinel_username", "sentinel_password"} {
		q.Del(k)
	}
	user := u.User
	u.RawQuery = q.Encode()
	var tc *tls.Config
	if u.Scheme == "rediss" {
		host, _, _ := net.SplitHostPort(u.Host)
		if tc, err = tf.config(cmpOr(host, u.Host)); err != nil {
			return nil, "", err
		}
	} else if tf.set() {
		return nil, "", errors.New("cluster: Redis TLS files or insecure_skip_verify are set but the URL is redis://: use rediss://")
	}
	bad := func(err error) error {
		// go-redis' messages name options, not the URL's secrets.
		return fmt.Errorf("cluster: the Redis URL: %s", strings.ReplaceAll(err.Error(), rawURL, "<url>"))
	}
	switch {
	case q.Has("master_name"):
		u.User = nil // the URL's user is the primary's; go-redis would give it to the Sentinels
		o, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return nil, "", bad(err)
		}
		if user != nil {
			o.Username = user.Username()
			o.Password, _ = user.Password()
		}
		o.SentinelUsername, o.SentinelPassword = sentUser, sentPass
		o.ContextTimeoutEnabled = true
		o.TLSConfig = tc
		return redis.NewFailoverClient(o), Sentinel, nil
	case clusterMode || q.Has("addr"):
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, "", bad(err)
		}
		o.ContextTimeoutEnabled = true
		o.TLSConfig = tc
		return redis.NewClusterClient(o), Cluster, nil
	default:
		o, err := redis.ParseURL(u.String())
		if err != nil {
			return nil, "", bad(err)
		}
		o.ContextTimeoutEnabled = true
		o.TLSConfig = tc
		return redis.NewClient(o), Standalone, nil
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// config builds the client TLS configuration for serverName.
func (t TLSFiles) config(serverName string) (*tls.Config, error) {
	tc := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // an explicit, documented setting
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cluster: Redis TLS CA file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cluster: Redis TLS CA file %s holds no PEM certificate", t.CAFile)
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("cluster: Redis TLS needs both a client certificate file and its key file, or neither")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cluster: Redis TLS client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Describe names where c connects, for logs: the topology and addresses,
// never credentials.
func Describe(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return "cluster " + strings.Join(c.Options().Addrs, ",")
	case *redis.Client:
		return c.Options().Addr // a Sentinel client shows its master name here
	}
	return fmt.Sprintf("%T", c)
}
