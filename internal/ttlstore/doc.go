// Package ttlstore is the one key-value store with a time to live that the
// gateway keeps shared state in: package pool's user assignments (user key
// -> replica, through pool/assign) and the Gradio front door's caller
// sessions (session hash -> binding). It has an in-process version,
// [Memory], and a Redis version, [Redis], shared by the gateways of a
// cluster.
//
// Keys and values are opaque strings. A Get never returns an expired
// entry; ttl <= 0 means no expiry. Every method that may do I/O takes a
// context first.
//
// # Memory
//
// [Memory] expires entries lazily and, unless disabled, sweeps the rest
// periodically, so memory stays bounded by the keys written within one
// TTL plus one sweep interval; [Memory.Close] stops the sweeper. Its clock
// can be injected (MemoryConfig.Now) for tests that move time by hand.
//
// # Redis
//
// [Redis] keeps each entry as one string key (RedisConfig.KeyPrefix +
// key) with Redis' own expiry. With RedisConfig.IndexKey it also keeps a
// sorted set of the keys scored by expiry, which makes Len cheap; every
// write then runs in a MULTI transaction, so the two names must hash to
// one Redis Cluster slot: give them one hash tag ("{gradiopool}:...").
package ttlstore

import "errors"

// ErrClosed is returned by a closed [Memory].
var ErrClosed = errors.New("store closed")
