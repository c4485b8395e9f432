package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/pool/assign"
)

func runScale(ctx context.Context, e *env, s *Section) error {
	s.Method = "Memory at scale: long calls in flight (through the pool library, then through the gateway), callers waiting for a session, and user assignments. Memory is `runtime.MemStats` after two forced garbage collections " +
		"(live heap, `HeapAlloc`, plus goroutine stacks, `StackInuse`), read before and while the load is held; " +
		"the difference is divided by the number of calls, waiters or users."
	type part struct {
		name string
		run  func(context.Context, *env, *Section) error
	}
	parts := []part{
		{"calls in flight (pool library)", scaleInFlight},
		{"calls in flight (gateway)", scaleInFlightGateway},
		{"goroutine census", func(context.Context, *env, *Section) error {
			if e.inFlightPoolCensus != nil || e.inFlightGatewayCensus != nil {
				s.Tables = append(s.Tables, censusTable(e.inFlightPoolCensus, e.inFlightGatewayCensus, 150))
				if e.inFlightPoolCensus["net/http.(*persistConn).readLoop"]+e.inFlightGatewayCensus["net/http.(*persistConn).readLoop"] > 0 {
					s.note("in the goroutine census, `net/http.(*persistConn).readLoop` and `writeLoop` are HTTP connections the Go client opened while the calls ran (fewer than one per call: some were kept idle from the warm-up).")
				}
				s.note("in the goroutine census, `net/http.(*conn).serve` and `backgroundRead` are the gateway's server side of each caller's connection; `bench.*` is the harness's own caller goroutine; the rest are started per call by our packages.")
			}
			return nil
		}},
		{"waiters", scaleWaiters},
		{"user assignments", scaleAssignments},
	}
	failed := 0
	for _, p := range parts {
		e.logf("  scale: %s", p.name)
		if err := p.run(ctx, e, s); err != nil {
			failed++
			s.note("%s: not measured: %v", p.name, err)
			e.logf("  scale: %s: %v", p.name, err)
		}
	}
	if failed == len(parts) {
		return fmt.Errorf("no part of this section could run")
	}
	// The per-call target, on whichever of the two in-flight figures exist.
	var got, over []string
	for _, v := range []struct {
		name string
		m    *perCallMem
	}{{"pool library", e.inFlightPool}, {"through the gateway", e.inFlightGateway}} {
		if v.m == nil {
			continue
		}
		got = append(got, fmt.Sprintf("%s: %s", v.name, v.m))
		if v.m.Total() > 64*1024 {
			over = append(over, fmt.Sprintf("%s: each call in flight holds %s of heap and %.1f goroutines whose stacks take %s", v.name, kib(v.m.Heap), v.m.Goroutines, kib(v.m.Stack)))
		}
	}
	if len(got) > 0 {
		why := ""
		if len(over) > 0 {
			why = "over the budget " + strings.Join(over, "; ")
			if c := e.inFlightGatewayCensus; c != nil && e.inFlightGateway != nil && e.inFlightGateway.Total() > 64*1024 {
				why += "; the goroutines per call through the gateway: " + censusSummary(c, 150)
			} else if c := e.inFlightPoolCensus; c != nil {
				why += "; the goroutines per call in the pool library: " + censusSummary(c, 150)
			}
		}
		// First among the section's highlights, as in its tables.
		s.Highlights = append([]string{fmt.Sprintf("Memory per call in flight (150 long streamed calls): %s.", strings.Join(got, "; "))}, s.Highlights...)
		s.Targets = append(s.Targets, Target{
			Goal:     "at most 64 KiB per call in flight",
			Measured: strings.Join(got, "; "),
			Met:      len(over) == 0,
			Why:      why,
		})
	}
	return nil
}

// scaleAssignments stores N user -> replica assignments in the ROUTER's
// in-memory store and measures the heap it holds.
func scaleAssignments(ctx context.Context, e *env, s *Section) error {
	n := e.pickInt(1_000_000, 100_000)
	replicas := []string{"owner/app_1", "owner/app_dev", "owner/app_stage"}
	before := ReadMem()
	store := assign.NewMemory(assign.MemoryConfig{})
	defer store.Close()
	t0 := time.Now()
	for i := range n {
		// Each key is made here and kept only by the store, so the heap
		// growth is exactly what the store holds for its users.
		if err := store.Set(ctx, userKey(i), replicas[i%len(replicas)], time.Hour); err != nil {
			return fmt.Errorf("store.Set: %w", err)
		}
	}
	setTime := time.Since(t0)
	probe := userKey(n / 2)
	after := ReadMem()
	t0 = time.Now()
	for range 100_000 {
		if _, ok, err := store.Get(ctx, probe); err != nil || !ok {
			return fmt.Errorf("store.Get lost an assignment (ok=%v, err=%v)", ok, err)
		}
	}
	getTime := time.Since(t0) / 100_000
	if got, _ := store.Len(ctx); got != n {
		return fmt.Errorf("store holds %d assignments, want %d", got, n)
	}
	d := after.Sub(before)
	s.Tables = append(s.Tables, Table{
		Caption: fmt.Sprintf("User assignments: %d users in `assign.Memory` (the ROUTER's store), keys are 32-hex-digit hashes as the pool stores them.", n),
		Header:  []string{"users", "heap held", "per user", "Set (mean, incl. hashing the key)", "Get (mean)"},
		Rows: [][]string{{
			fmt.Sprint(n), mib(float64(d.Heap)), fmt.Sprintf("%.0f B", float64(d.Heap)/float64(n)),
			fmt.Sprintf("%.0f ns", float64(setTime)/float64(n)), fmt.Sprintf("%d ns", getTime.Nanoseconds()),
		}},
	})
	s.highlight("%d user assignments: %s in the in-memory store, %.0f bytes per user.", n, mib(float64(d.Heap)), float64(d.Heap)/float64(n))
	if e.opts.Quick {
		s.note("quick mode: %d assignments instead of 1 000 000", n)
	}
	return nil
}

// userKey is shaped like the pool's keys: a hash of the e-mail, hex-encoded.
func userKey(i int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "user%d@example.com", i))
	return hex.EncodeToString(sum[:16])
}

// censusTable shows where the goroutines of the calls in flight come from:
// the growth of each start function's count, per call.
func censusTable(lib, gw map[string]int, calls int) Table {
	all := map[string]int{}
	for k, v := range lib {
		all[k] += v
	}
	for k, v := range gw {
		all[k] += v
	}
	keys := sortedKeys(all)
	sortBy(keys, func(k string) float64 { return -float64(all[k]) })
	t := Table{
		Caption: "Goroutines added per call in flight, by the function each goroutine was started with (from the goroutine profile, last repetition; growth of at least 0.1 per call).",
		Header:  []string{"started by", "pool library", "through the gateway"},
	}
	per := func(m map[string]int, k string) string {
		if m == nil {
			return "not measured"
		}
		return fmt.Sprintf("%.2f", float64(m[k])/float64(calls))
	}
	var sumL, sumG int
	for _, k := range keys {
		sumL += lib[k]
		sumG += gw[k]
		if float64(all[k])/float64(calls) < 0.1 {
			continue
		}
		t.Rows = append(t.Rows, []string{"`" + shortFunc(k) + "`", per(lib, k), per(gw, k)})
	}
	t.Rows = append(t.Rows, []string{"total", fmt.Sprintf("%.2f", float64(sumL)/float64(calls)), fmt.Sprintf("%.2f", float64(sumG)/float64(calls))})
	return t
}

// censusSummary lists the biggest start functions of a census, per call.
func censusSummary(c map[string]int, calls int) string {
	keys := sortedKeys(c)
	sortBy(keys, func(k string) float64 { return -float64(c[k]) })
	var parts []string
	for _, k := range keys {
		if per := float64(c[k]) / float64(calls); per >= 0.5 {
			parts = append(parts, fmt.Sprintf("%.1f %s", per, shortFunc(k)))
		}
	}
	return strings.Join(parts, ", ")
}

// shortFunc drops the module path from a function name.
func shortFunc(fn string) string {
	return strings.TrimPrefix(fn, "github.com/gradiopool/gradiopool/")
}
