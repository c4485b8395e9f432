// Package assign remembers which replica each user is pinned to, for a limited
// time.
//
//	store := assign.NewMemory(assign.MemoryConfig{})
//	defer store.Close()
//	_ = store.Set(ctx, key, "mugenAILP_1", time.Hour)
//	replica, ok, err := store.Get(ctx, key)
//
// Keys are opaque strings chosen by the caller; package pool passes a keyed
// hash of the user's e-mail, never the e-mail itself. Values are replica names:
// short strings, so that a shared implementation (Redis: SET key value PX ttl,
// GET, DEL, and a counter or DBSIZE for Len) stores a few dozen bytes per user.
//
// # Expiry
//
// [Memory] expires entries lazily (Get never returns an expired entry) and
// sweeps the rest periodically, so memory stays bounded by the number of users
// seen within one TTL plus one sweep interval. The sweeper goroutine stops on
// [Memory.Close]. An assignment with package pool's 32-hex-digit key takes
// about 70 bytes of heap: one million take about 65 MiB (BenchmarkMemory1M
// measures it). A shared implementation can check itself against the same
// expectations with package assigntest.
package assign
