// Package fdtest holds the helpers of the front door's tests, for tests
// only: the gateway's tests (through the whole gateway) and the front
// door's own (gateway/frontdoor, over a pool without the gateway) speak
// the same Gradio protocol to it and run the same official JS client
// scripts, and test files cannot be shared between packages, so these
// helpers live here once instead of twice; so does a socket helper of the
// slow-client tests (SmallReceiveWindow). Nothing outside _test.go files
// may import it.
//
// The helpers fail the test they are given (testing.TB) except those
// named for goroutines other than the test's, which return errors.
package fdtest
