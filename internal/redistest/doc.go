// Package redistest gives tests a Redis server on loopback: a real
// redis-server when one is installed (CI installs it), else an in-process
// miniredis. Tests that must run against the real thing set
// GRADIOPOOL_REQUIRE_REDIS=1, and then a missing redis-server fails them
// instead of falling back.
package redistest
