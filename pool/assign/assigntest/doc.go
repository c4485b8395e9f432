// Package assigntest is a conformance suite for implementations of
// [assign.Store], in the manner of testing/slogtest: a Redis (or other
// shared) store runs the same cases as the in-memory one, so that package
// pool can rely on the same behaviour.
//
//	func TestRedisStore(t *testing.T) {
//		assigntest.Run(t, func(t *testing.T) assign.Store { return newRedisStore(t) }, assigntest.Options{})
//	}
package assigntest
