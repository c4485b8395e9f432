//go:build race

package bench

// raceEnabled: the race detector allows at most 8128 live goroutines, so
// the harness scales its goroutine-heavy runs down under it.
const raceEnabled = true
