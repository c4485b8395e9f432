package ttlstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// errNoIndex is Len's error on a Redis store kept without an index.
var errNoIndex = errors.New("ttlstore: Len needs RedisConfig.IndexKey")

// RedisConfig configures [NewRedis].
type RedisConfig struct {
	// Client is the connection to use (redis.NewClient, NewClusterClient,
	// NewFailoverClient, ...). Required; the store does not close it.
	Client redis.UniversalClient
	// KeyPrefix is prepended to every key. Give it a Redis Cluster hash
	// tag ("{name}:...") when IndexKey is set.
	KeyPrefix string
	// IndexKey, if set, names a sorted set of the keys scored by expiry
	// that makes Len cheap (expired members are trimmed on every Set and
	// Len). It must hash to KeyPrefix's slot. Empty: no index; writes are
	// then single commands and Len returns an error.
	IndexKey string
}

// Redis is the store in Redis, shared by several gateway instances.
//
// The index itself expires: every write with a TTL sets its expiry to
// that TTL, the longest any member written with it can live, so nothing
// stays once every gateway is gone. Stores sharing an index are expected
// to use one TTL.
type Redis struct {
	c      redis.UniversalClient
	prefix string
	index  string
}

// NewRedis returns a store using cfg.Client. It does no I/O.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	if cfg.Client == nil {
		return nil, errors.New("ttlstore: RedisConfig.Client is nil")
	}
	return &Redis{c: cfg.Client, prefix: cfg.KeyPrefix, index: cfg.IndexKey}, nil
}

// Get returns the value of key, if it has not expired.
func (r *Redis) Get(ctx context.Context, key string) (string, bool, error) {
	v, err := r.c.Get(ctx, r.prefix+key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("ttlstore: redis get: %w", err)
	}
	return v, true, nil
}

// Set sets key to val for ttl (<= 0: no expiry), replacing any earlier
// value and its expiry.
func (r *Redis) Set(ctx context.Context, key, val string, ttl time.Duration) error {
	var exp time.Duration // 0: no expiry (redis.KeepTTL is not wanted here)
	if ttl > 0 {
		exp = ttl
	}
	if r.index == "" {
		if err := r.c.Set(ctx, r.prefix+key, val, exp).Err(); err != nil {
			return fmt.Errorf("ttlstore: redis set: %w", err)
		}
		return nil
	}
	now := time.Now()
	score := "+inf"
	if ttl > 0 {
		score = strconv.FormatInt(now.Add(ttl).UnixMilli(), 10)
	}
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.prefix+key, val, exp)
		p.Do(ctx, "ZADD", r.index, score, key)
		p.ZRemRangeByScore(ctx, r.index, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
		if ttl > 0 {
			p.PExpire(ctx, r.index, ttl) // see the type's comment
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ttlstore: redis set: %w", err)
	}
	return nil
}

// Claim sets key to val for ttl unless key holds a value, and returns the
// value key holds after the call: val when the claim won, else the earlier
// value (whose expiry is left as it was). One round trip.
func (r *Redis) Claim(ctx context.Context, key, val string, ttl time.Duration) (string, error) {
	args := redis.SetArgs{Mode: "NX", Get: true}
	score := "+inf"
	if ttl > 0 {
		args.TTL = ttl
		score = strconv.FormatInt(time.Now().Add(ttl).UnixMilli(), 10)
	}
	var set *redis.StatusCmd
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		set = p.SetArgs(ctx, r.prefix+key, val, args)
		if r.index != "" {
			p.Do(ctx, "ZADD", r.index, "NX", score, key)
			if ttl > 0 {
				p.PExpire(ctx, r.index, ttl)
			}
		}
		return nil
	})
	switch {
	case err == nil:
		return set.Val(), nil // the earlier value: the claim lost
	case errors.Is(err, redis.Nil) && errors.Is(set.Err(), redis.Nil):
		return val, nil // no earlier value: the claim won
	}
	return "", fmt.Errorf("ttlstore: redis claim: %w", err)
}

// getRefresh reads a value and, when found, extends it (and its index
// entry, if any) to ttl from now, in one round trip.
//
// KEYS: the entry, the index (or none). ARGV: ttl ms, expiry score, key.
var getRefresh = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  if KEYS[2] then
    redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[3])
    redis.call('PEXPIRE', KEYS[2], ARGV[1])
  end
end
return v
`)

// GetRefresh is Get; when the key is found, its expiry is also set to ttl
// from now (ttl <= 0: left as it is), in one round trip (a script).
func (r *Redis) GetRefresh(ctx context.Context, key string, ttl time.Duration) (string, bool, error) {
	if ttl <= 0 {
		return r.Get(ctx, key)
	}
	keys := []string{r.prefix + key}
	if r.index != "" {
		keys = append(keys, r.index)
	}
	score := strconv.FormatInt(time.Now().Add(ttl).UnixMilli(), 10)
	v, err := getRefresh.Run(ctx, r.c, keys, ttl.Milliseconds(), score, key).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("ttlstore: redis get: %w", err)
	}
	return v, true, nil
}

// Delete removes key; deleting a missing key is no error.
func (r *Redis) Delete(ctx context.Context, key string) error {
	if r.index == "" {
		if err := r.c.Del(ctx, r.prefix+key).Err(); err != nil {
			return fmt.Errorf("ttlstore: redis delete: %w", err)
		}
		return nil
	}
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.prefix+key)
		p.ZRem(ctx, r.index, key)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ttlstore: redis delete: %w", err)
	}
	return nil
}

// Len counts the members of the index whose expiry has not passed; it
// needs RedisConfig.IndexKey.
func (r *Redis) Len(ctx context.Context) (int, error) {
	if r.index == "" {
		return 0, errNoIndex
	}
	var card *redis.IntCmd
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, r.index, "-inf", strconv.FormatInt(time.Now().UnixMilli(), 10))
		card = p.ZCard(ctx, r.index)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("ttlstore: redis len: %w", err)
	}
	return int(card.Val()), nil
}
