package cluster

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/pool/assign"
)

// Store wraps shared (the assignments in Redis, assign.Redis) so that a
// Redis outage does not unpin users: every assignment is also kept in a
// local memory store, which answers while Redis is lost or slow (then a
// user first seen during the outage is pinned by this gateway alone). A
// failed Redis operation switches the whole Coordinator to its local mode,
// so calls do not each wait for Redis to time out. Close the returned store
// after the pool.
func (c *Coordinator) Store(shared assign.Store) *Store {
	return &Store{c: c, shared: shared, local: assign.NewMemory(assign.MemoryConfig{})}
}

// Store is the fallback assignment store of [Coordinator.Store]. It is an
// [assign.Claimer] when the shared store is one.
//
// One round trip per call: package pool reads a user's assignment (Get)
// and then refreshes it (Set with the same replica). When the shared store
// is an [assign.Refresher], Get extends the assignment in the same round
// trip, by the TTL of the last Set (package pool uses one TTL), and a Set
// that changes nothing this gateway knows of is kept local.
//
// Each Redis operation is bounded by the Coordinator's operation time-out
// (LeaseTTL/3, at most 2 s), not by the caller's context: so a time-out is
// Redis' failure, reported (the Coordinator switches to local mode), and
// the caller gets the assignment this gateway knows, instead of its user
// being routed as new.
type Store struct {
	c      *Coordinator
	shared assign.Store
	local  *assign.Memory
	ttl    atomic.Int64 // the TTL of the last Set or Claim, for GetRefresh
}

var (
	_ assign.Store   = (*Store)(nil)
	_ assign.Claimer = (*Store)(nil)
)

// opCtx bounds one shared-store operation by the Coordinator's time-out
// only (see Store).
func (s *Store) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.c.cfg.opTimeout)
}

// sharedOK reports whether err leaves the shared store's answer usable; a
// failure switches the Coordinator to local mode.
func (s *Store) sharedOK(err error) bool {
	if err == nil {
		return true
	}
	s.c.failed(err)
	return false
}

// Get implements [assign.Store]: Redis' answer while it answers (extended
// by the last TTL set, see Store); when Redis has none but this gateway
// knows one (Redis restarted empty), the local one is written back, first
// writer wins, as a first assignment is; while Redis fails, the local one.
func (s *Store) Get(ctx context.Context, key string) (string, bool, error) {
	if s.c.RedisUp() {
		ttl := time.Duration(s.ttl.Load())
		octx, cancel := s.opCtx(ctx)
		s.c.ops[opAssign].Add(1)
		var v string
		var ok bool
		var err error
		if r, can := s.shared.(assign.Refresher); can && ttl > 0 {
			v, ok, err = r.GetRefresh(octx, key, ttl)
		} else {
			v, ok, err = s.shared.Get(octx, key)
		}
		cancel()
		if s.sharedOK(err) {
			if ok {
				if ttl > 0 {
					_ = s.local.Set(ctx, key, v, ttl)
				}
				return v, true, nil
			}
			lv, lok, _ := s.local.Get(ctx, key)
			if !lok {
				return "", false, nil
			}
			return s.writeBack(ctx, key, lv, ttl), true, nil
		}
	}
	return s.local.Get(ctx, key)
}

// writeBack claims key for replica in Redis (known locally, missing
// there): the answer is whichever assignment Redis holds after it.
func (s *Store) writeBack(ctx context.Context, key, replica string, ttl time.Duration) string {
	cl, ok := s.shared.(assign.Claimer)
	if !ok || ttl <= 0 {
		return replica
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	s.c.ops[opAssign].Add(1)
	v, err := cl.Claim(octx, key, replica, ttl)
	if !s.sharedOK(err) {
		return replica
	}
	if v != replica {
		_ = s.local.Set(ctx, key, v, ttl)
	}
	return v
}

// Set implements [assign.Store]. A Set that only refreshes what this
// gateway already holds, with the TTL its Gets extend by, needs no round
// trip: the Get of the same call extended it in Redis.
func (s *Store) Set(ctx context.Context, key, replica string, ttl time.Duration) error {
	prev, had, _ := s.local.Get(ctx, key)
	_ = s.local.Set(ctx, key, replica, ttl)
	_, refresher := s.shared.(assign.Refresher)
	if old := s.ttl.Swap(int64(ttl)); refresher && had && prev == replica && old == int64(ttl) && ttl > 0 {
		return nil
	}
	if s.c.RedisUp() {
		octx, cancel := s.opCtx(ctx)
		s.c.ops[opAssign].Add(1)
		s.sharedOK(s.shared.Set(octx, key, replica, ttl))
		cancel()
	}
	return nil
}

// Claim implements [assign.Claimer]: the shared store's claim (SET NX)
// while Redis answers, else a local one.
func (s *Store) Claim(ctx context.Context, key, replica string, ttl time.Duration) (string, error) {
	s.ttl.Store(int64(ttl))
	if cl, ok := s.shared.(assign.Claimer); ok && s.c.RedisUp() {
		octx, cancel := s.opCtx(ctx)
		s.c.ops[opAssign].Add(1)
		v, err := cl.Claim(octx, key, replica, ttl)
		cancel()
		if s.sharedOK(err) {
			_ = s.local.Set(ctx, key, v, ttl)
			return v, nil
		}
	}
	return s.local.Claim(ctx, key, replica, ttl)
}

// Delete implements [assign.Store].
func (s *Store) Delete(ctx context.Context, key string) error {
	_ = s.local.Delete(ctx, key)
	if s.c.RedisUp() {
		octx, cancel := s.opCtx(ctx)
		defer cancel()
		s.c.ops[opAssign].Add(1)
		if err := s.shared.Delete(octx, key); !s.sharedOK(err) {
			return err
		}
	}
	return nil
}

// Len implements [assign.Store]: the shared count while Redis answers.
func (s *Store) Len(ctx context.Context) (int, error) {
	if s.c.RedisUp() {
		octx, cancel := s.opCtx(ctx)
		s.c.ops[opAssign].Add(1)
		n, err := s.shared.Len(octx)
		cancel()
		if s.sharedOK(err) {
			return n, nil
		}
	}
	return s.local.Len(ctx)
}

// Close stops the local store.
func (s *Store) Close() error { return s.local.Close() }
