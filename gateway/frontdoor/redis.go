package frontdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore is a [Store] in Redis, shared by the gateways of a cluster, so
// that a caller's queue/join and queue/data may reach different gateways
// behind a plain load balancer. Each session is one key (prefix + caller
// session hash) holding the Binding as JSON, with Redis' own expiry.
type RedisStore struct {
	c      redis.UniversalClient
	prefix string
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a store on c (not closed by the store) whose keys
// start with prefix (e.g. "{gradiopool}:fd:").
func NewRedisStore(c redis.UniversalClient, prefix string) (*RedisStore, error) {
	if c == nil {
		return nil, errors.New("frontdoor: redis client is nil")
	}
	return &RedisStore{c: c, prefix: prefix}, nil
}

// Get implements [Store].
func (r *RedisStore) Get(ctx context.Context, front string) (Binding, bool, error) {
	v, err := r.c.Get(ctx, r.prefix+front).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return Binding{}, false, nil
	case err != nil:
		return Binding{}, false, fmt.Errorf("frontdoor: redis get: %w", err)
	}
	var b Binding
	if err := json.Unmarshal(v, &b); err != nil {
		return Binding{}, false, fmt.Errorf("frontdoor: redis get: bad binding: %w", err)
	}
	return b, true, nil
}

// Set implements [Store]; ttl <= 0 means no expiry.
func (r *RedisStore) Set(ctx context.Context, front string, b Binding, ttl time.Duration) error {
	v, _ := json.Marshal(b)
	if ttl < 0 {
		ttl = 0
	}
	if err := r.c.Set(ctx, r.prefix+front, v, ttl).Err(); err != nil {
		return fmt.Errorf("frontdoor: redis set: %w", err)
	}
	return nil
}

// Delete implements [Store].
func (r *RedisStore) Delete(ctx context.Context, front string) error {
	if err := r.c.Del(ctx, r.prefix+front).Err(); err != nil {
		return fmt.Errorf("frontdoor: redis delete: %w", err)
	}
	return nil
}
