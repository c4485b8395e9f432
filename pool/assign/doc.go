// Package assign remembers which replica each user is pinned to, for a limited
// time.
//
//	store := assign.NewMemory(assign.MemoryConfig{})
//	defer store.Close()
//	_ = store.Set(ctx, key, "app", time.Hour)
//	replica, ok, err := store.Get(ctx, key)
//
// Keys are opaque strings chosen by the caller; package pool passes a keyed
// hash of the user's e-mail, never the e-mail itself. Values are replica names:
// short strings, so that a shared store keeps a few dozen bytes per user.
//
// Two implementations are provided, both the module's one TTL store
// (internal/ttlstore, which the Gradio front door keeps its caller
// sessions in too): [Memory] (one process; the default of package pool)
// and [Redis] (shared by several gateway instances, so that a
// user stays on one replica whichever instance serves them):
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, err := assign.NewRedis(assign.RedisConfig{Client: rdb})
//	p, err := pool.New(pool.Config{Replicas: replicas, Store: store, HashKey: sharedSecret})
//
// Instances sharing a store must share Config.HashKey too, or they compute
// different keys for the same user.
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
