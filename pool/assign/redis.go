package assign

import (
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/internal/ttlstore"
)

// DefaultRedisPrefix namespaces the keys of [Redis] when RedisConfig.Prefix
// is empty. The braces are a Redis Cluster hash tag: every key of the store
// lives in one slot, so that its transactions work on a cluster.
const DefaultRedisPrefix = "{gradiopool}:assign:"

// RedisConfig configures [NewRedis].
type RedisConfig struct {
	// Client is the connection to use (redis.NewClient, NewClusterClient,
	// NewFailoverClient, ...). Required; the store does not close it.
	Client redis.UniversalClient
	// Prefix is prepended to every key. Empty: DefaultRedisPrefix. Give
	// deployments that share a Redis but not their users different prefixes.
	Prefix string
}

// Redis is a [Store], [Refresher] and [Claimer] in Redis, shared by
// several gateway instances so that a user stays on one replica whichever
// instance serves them: the module's one Redis TTL store
// (internal/ttlstore). Each assignment is one string key (prefix + "u:" +
// user key = replica name, with Redis' own expiry), plus a member of one
// sorted set (prefix + "index") scored by expiry time that makes Len
// cheap. Stores sharing a prefix are expected to use one TTL (package
// pool's UserAssignmentTTL).
type Redis = ttlstore.Redis

var (
	_ Store     = (*Redis)(nil)
	_ Refresher = (*Redis)(nil)
	_ Claimer   = (*Redis)(nil)
)

// NewRedis returns a store using cfg.Client. It does no I/O.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	if cfg.Client == nil {
		return nil, errors.New("assign: RedisConfig.Client is nil")
	}
	p := cfg.Prefix
	if p == "" {
		p = DefaultRedisPrefix
	}
	return ttlstore.NewRedis(ttlstore.RedisConfig{Client: cfg.Client, KeyPrefix: p + "u:", IndexKey: p + "index"})
}
