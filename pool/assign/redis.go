package assign

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisPrefix namespaces the keys of [Redis] when RedisConfig.Prefix
// is empty. The braces are a Redis Cluster hash tag: every key of the store
// lives in one slot, so that the transactions below work on a cluster.
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

// Redis is a [Store] in Redis, shared by several gateway instances so that a
// user stays on one replica whichever instance serves them. Each assignment
// is one string key (prefix + user key = replica name, with Redis' own
// expiry), plus a member of one sorted set scored by expiry time that makes
// Len cheap; expired members are trimmed on every Set and Len.
//
// The index itself expires (indexTTL): every write with a TTL sets its
// expiry to that TTL, the longest any member written with it can live, so
// nothing stays once every gateway is gone. Stores sharing a prefix are
// expected to use one TTL (package pool's UserAssignmentTTL).
type Redis struct {
	c      redis.UniversalClient
	prefix string
	index  string
}

var (
	_ Store     = (*Redis)(nil)
	_ Refresher = (*Redis)(nil)
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
	return &Redis{c: cfg.Client, prefix: p + "u:", index: p + "index"}, nil
}

// Get implements [Store].
func (r *Redis) Get(ctx context.Context, key string) (string, bool, error) {
	v, err := r.c.Get(ctx, r.prefix+key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("assign: redis get: %w", err)
	}
	return v, true, nil
}

// Set implements [Store].
func (r *Redis) Set(ctx context.Context, key, replica string, ttl time.Duration) error {
	now := time.Now()
	score := "+inf"
	var exp time.Duration // 0: no expiry (redis.KeepTTL is not wanted here)
	if ttl > 0 {
		exp = ttl
		score = strconv.FormatInt(now.Add(ttl).UnixMilli(), 10)
	}
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.prefix+key, replica, exp)
		p.Do(ctx, "ZADD", r.index, score, key)
		p.ZRemRangeByScore(ctx, r.index, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
		if ttl > 0 {
			p.PExpire(ctx, r.index, ttl) // see indexTTL
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("assign: redis set: %w", err)
	}
	return nil
}

// getRefresh reads an assignment and, when found, extends it (and its
// index entry) to ttl from now, in one round trip.
//
// KEYS: the assignment, the index. ARGV: ttl ms, expiry score, user key.
var getRefresh = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
end
return v
`)

// GetRefresh implements [Refresher]: Get, and when found, the assignment's
// expiry set to ttl from now, in one round trip (a script).
func (r *Redis) GetRefresh(ctx context.Context, key string, ttl time.Duration) (string, bool, error) {
	if ttl <= 0 {
		return r.Get(ctx, key)
	}
	score := strconv.FormatInt(time.Now().Add(ttl).UnixMilli(), 10)
	v, err := getRefresh.Run(ctx, r.c, []string{r.prefix + key, r.index}, ttl.Milliseconds(), score, key).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("assign: redis get: %w", err)
	}
	return v, true, nil
}

// Delete implements [Store].
func (r *Redis) Delete(ctx context.Context, key string) error {
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.prefix+key)
		p.ZRem(ctx, r.index, key)
		return nil
	})
	if err != nil {
		return fmt.Errorf("assign: redis delete: %w", err)
	}
	return nil
}

// Len implements [Store]: the members of the index whose expiry has not
// passed.
func (r *Redis) Len(ctx context.Context) (int, error) {
	var card *redis.IntCmd
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, r.index, "-inf", strconv.FormatInt(time.Now().UnixMilli(), 10))
		card = p.ZCard(ctx, r.index)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("assign: redis len: %w", err)
	}
	return int(card.Val()), nil
}
