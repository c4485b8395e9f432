package frontdoor

import (
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/internal/ttlstore"
)

// RedisStore is a [Store] in Redis, shared by the gateways of a cluster, so
// that a caller's queue/join and queue/data may reach different gateways
// behind a plain load balancer. Each session is one key (prefix + caller
// session hash) holding the Binding as JSON, with Redis' own expiry: the
// module's one Redis TTL store (internal/ttlstore) without an index.
type RedisStore struct {
	bindings
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a store on c (not closed by the store) whose keys
// start with prefix (e.g. "{gradiopool}:fd:").
func NewRedisStore(c redis.UniversalClient, prefix string) (*RedisStore, error) {
	if c == nil {
		return nil, errors.New("frontdoor: redis client is nil")
	}
	r, err := ttlstore.NewRedis(ttlstore.RedisConfig{Client: c, KeyPrefix: prefix})
	if err != nil {
		return nil, err
	}
	return &RedisStore{bindings{kv: r}}, nil
}
