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
	s.Method = "Three measurements of memory at scale. Memory is `runtime.MemStats` after two forced garbage collections " +
		"(live heap, `HeapAlloc`, plus goroutine stacks, `StackInuse`), read before and while the load is held; " +
		"the difference is divided by the number of calls, waiters or users."
	type part struct {
		name string
		run  func(context.Context, *env, *Section) error
	}
	parts := []part{
		{"calls in flight (pool library)", scaleInFlight},
		{"calls in flight (gateway)", scaleInFlightGateway},
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
			over = append(over, fmt.Sprintf("%s, each call in flight holds %.1f goroutines (stacks: %s of the %s)", v.name, v.m.Goroutines, kib(v.m.Stack), kib(v.m.Total())))
		}
	}
	if len(got) > 0 {
		why := ""
		if len(over) > 0 {
			why = "over the budget " + strings.Join(over, "; ") +
				"; through the gateway that includes the HTTP/1.1 server connection each concurrent caller needs (its goroutines and read/write buffers) and the handler relaying the event stream"
		}
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
