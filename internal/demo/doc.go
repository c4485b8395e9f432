// Package demo is the workload of `gradiopool demo`: three simulated
// replicas registered as the seed's Spaces, the gateway in front of them
// (gateway.Open), registered and anonymous users driven through it over real
// HTTP, and a summary of what was measured.
package demo
