package assign

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claimer is a [Store] that can make a first assignment atomically, so
// that several gateways seeing a new user at the same moment agree on one
// replica. Package pool uses it, when the Store has it, for every user it
// finds unassigned.
type Claimer interface {
	// Claim assigns key to replica for ttl (<= 0: no expiry) unless key is
	// already assigned, and returns the replica key is assigned to after
	// the call: replica when the claim won, else the earlier assignment
	// (whose expiry is left as it was).
	Claim(ctx context.Context, key, replica string, ttl time.Duration) (string, error)
}

var (
	_ Claimer = (*Memory)(nil)
	_ Claimer = (*Redis)(nil)
)

// Claim implements [Claimer].
func (m *Memory) Claim(ctx context.Context, key, replica string, ttl time.Duration) (string, error) {
	if m.closed() {
		return "", ErrClosed
	}
	e := entry{name: m.intern(replica)}
	now := time.Now()
	if ttl > 0 {
		e.exp = now.Add(ttl).UnixNano()
	}
	s := m.shardFor(key)
	s.mu.Lock()
	if old, ok := s.m[key]; ok && (old.exp == 0 || old.exp > now.UnixNano()) {
		s.mu.Unlock()
		return m.name(old.name), nil
	}
	if s.m != nil {
		s.m[cloneKey(key)] = e
		s.peak = max(s.peak, len(s.m))
	}
	s.mu.Unlock()
	return replica, nil
}

// Claim implements [Claimer] with one SET NX GET (Redis 7.0 or later): the
// first gateway to write the key wins and every other one reads its value.
func (r *Redis) Claim(ctx context.Context, key, replica string, ttl time.Duration) (string, error) {
	now := time.Now()
	score := "+inf"
	args := redis.SetArgs{Mode: "NX", Get: true}
	if ttl > 0 {
		args.TTL = ttl
		score = strconv.FormatInt(now.Add(ttl).UnixMilli(), 10)
	}
	var set *redis.StatusCmd
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		set = p.SetArgs(ctx, r.prefix+key, replica, args)
		p.Do(ctx, "ZADD", r.index, "NX", score, key)
		if ttl > 0 {
			p.PExpire(ctx, r.index, ttl)
		}
		return nil
	})
	switch {
	case err == nil:
		return set.Val(), nil // the earlier value: the claim lost
	case errors.Is(err, redis.Nil) && errors.Is(set.Err(), redis.Nil):
		return replica, nil // no earlier value: the claim won
	}
	return "", fmt.Errorf("assign: redis claim: %w", err)
}
