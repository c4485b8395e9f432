package cluster

import (
	"context"
	"time"

	"github.com/gradiopool/gradiopool/pool/assign"
)

// Store wraps shared (the assignments in Redis, assign.Redis) so that a
// Redis outage does not unpin users: every assignment is also kept in a
// local memory store, which answers while Redis is lost (then a user
// first seen during the outage is pinned by this gateway alone). A failed
// Redis operation switches the whole Coordinator to its local mode, so
// calls do not each wait for Redis to time out. Close the returned store
// after the pool.
func (c *Coordinator) Store(shared assign.Store) *Store {
	return &Store{c: c, shared: shared, local: assign.NewMemory(assign.MemoryConfig{})}
}

// Store is the fallback assignment store of [Coordinator.Store]. It is an
// [assign.Claimer] when the shared store is one.
type Store struct {
	c      *Coordinator
	shared assign.Store
	local  *assign.Memory
}

var (
	_ assign.Store   = (*Store)(nil)
	_ assign.Claimer = (*Store)(nil)
)

// sharedOK reports whether err (of a shared-store call made with ctx)
// leaves the shared store's answer usable; a Redis failure switches the
// Coordinator to local mode.
func (s *Store) sharedOK(ctx context.Context, err error) bool {
	if err == nil {
		return true
	}
	if ctx.Err() == nil {
		s.c.failed(err)
	}
	return false
}

// Get implements [assign.Store].
func (s *Store) Get(ctx context.Context, key string) (string, bool, error) {
	if s.c.RedisUp() {
		s.c.ops[opAssign].Add(1)
		v, ok, err := s.shared.Get(ctx, key)
		if s.sharedOK(ctx, err) {
			return v, ok, nil
		}
		if ctx.Err() != nil {
			return "", false, err
		}
	}
	return s.local.Get(ctx, key)
}

// Set implements [assign.Store].
func (s *Store) Set(ctx context.Context, key, replica string, ttl time.Duration) error {
	_ = s.local.Set(ctx, key, replica, ttl)
	if s.c.RedisUp() {
		s.c.ops[opAssign].Add(1)
		if err := s.shared.Set(ctx, key, replica, ttl); !s.sharedOK(ctx, err) && ctx.Err() != nil {
			return err
		}
	}
	return nil
}

// Claim implements [assign.Claimer]: the shared store's claim (SET NX)
// while Redis answers, else a local one.
func (s *Store) Claim(ctx context.Context, key, replica string, ttl time.Duration) (string, error) {
	if cl, ok := s.shared.(assign.Claimer); ok && s.c.RedisUp() {
		s.c.ops[opAssign].Add(1)
		v, err := cl.Claim(ctx, key, replica, ttl)
		if s.sharedOK(ctx, err) {
			_ = s.local.Set(ctx, key, v, ttl)
			return v, nil
		}
		if ctx.Err() != nil {
			return "", err
		}
	}
	return s.local.Claim(ctx, key, replica, ttl)
}

// Delete implements [assign.Store].
func (s *Store) Delete(ctx context.Context, key string) error {
	_ = s.local.Delete(ctx, key)
	if s.c.RedisUp() {
		s.c.ops[opAssign].Add(1)
		if err := s.shared.Delete(ctx, key); !s.sharedOK(ctx, err) {
			return err
		}
	}
	return nil
}

// Len implements [assign.Store]: the shared count while Redis answers.
func (s *Store) Len(ctx context.Context) (int, error) {
	if s.c.RedisUp() {
		s.c.ops[opAssign].Add(1)
		n, err := s.shared.Len(ctx)
		if s.sharedOK(ctx, err) {
			return n, nil
		}
	}
	return s.local.Len(ctx)
}

// Close stops the local store.
func (s *Store) Close() error { return s.local.Close() }
