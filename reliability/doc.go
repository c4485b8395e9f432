// Package reliability is the fault-injection suite of gradiopool. It puts
// the gateway (gateway.Open: pool, sessions, HTTP) in front of simulated
// replicas (gradio/gradiotest), with an in-process toxiproxy between them
// for network faults and the simulator's own knobs for application faults,
// drives steady load through it, injects one fault per cell of a matrix,
// heals it and checks the promises:
//
//   - no call runs twice (the simulated app counts executions per call id);
//   - every call ends in a result or a typed JSON error (never an empty
//     200, never a non-JSON answer) before its deadline;
//   - no session is left in use and no goroutine is left behind once the
//     gateway is closed;
//   - full capacity comes back after the fault (the time is measured).
//
// The "Redis down" cell runs two gateways sharing a real redis-server
// (internal/redistest; skipped without one unless GRADIOPOOL_REQUIRE_REDIS=1,
// as CI sets) and checks each gateway's local share while Redis is lost,
// counted by the replicas themselves.
//
// Opt-in cells (GRADIOPOOL_RELIABILITY=long, or =quick for the short
// scale without the report) add the recovery cases of issue 21 (a
// flapping replica, a restart with no traffic, a freeze, the keep-alive
// race, a drain with front-door calls) and the Redis cases of issue 23
// (hung Redis, Sentinel and Cluster failovers, a dead gateway among queued
// callers, an ACL user without channel permission) on real redis-server
// processes; plain `go test` leaves them out.
//
// The abuse suite (TestAbuse) runs each attack of issue 20 against a
// `gradiopool serve` subprocess (so that its resident memory and
// goroutines are the gateway's own) over simulated replicas, with honest
// callers calling from another loopback address meanwhile: the attacker
// must get the bound's answer, every honest call must be served and the
// gateway's goroutines must come back. `go test` runs it small;
// GRADIOPOOL_RELIABILITY=abuse (`make abuse`) runs it at full size and
// rewrites the abuse region of docs/RELIABILITY.md.
//
// The package has only tests. `go test ./reliability/` runs the short
// matrix (seconds per cell) and a 30 s soak; CI runs both. With GRADIOPOOL_RELIABILITY=long
// (or -reliability.long) every cell runs longer under more load, and the
// figures are written to docs/RELIABILITY.md, like `gradiopool-bench`
// writes docs/BENCHMARKS.md: the document is generated, not written by
// hand.
package reliability
