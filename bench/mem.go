package bench

import (
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
)

// Mem is a snapshot of the process's Go memory after garbage collection.
type Mem struct {
	HeapAlloc  uint64 // bytes of live heap objects
	StackInuse uint64 // bytes of goroutine stacks
	Sys        uint64 // bytes obtained from the OS
	Goroutines int
}

// ReadMem forces two garbage collections (the second frees what finalizers
// released in the first) and reads the memory statistics.
func ReadMem() Mem {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Mem{
		HeapAlloc:  ms.HeapAlloc,
		StackInuse: ms.StackInuse,
		Sys:        ms.Sys,
		Goroutines: runtime.NumGoroutine(),
	}
}

// MemDelta is the growth between two snapshots. Fields are signed: memory can
// shrink between snapshots.
type MemDelta struct {
	Heap, Stack int64
	Goroutines  int
}

// Sub returns m - base.
func (m Mem) Sub(base Mem) MemDelta {
	return MemDelta{
		Heap:       int64(m.HeapAlloc) - int64(base.HeapAlloc),
		Stack:      int64(m.StackInuse) - int64(base.StackInuse),
		Goroutines: m.Goroutines - base.Goroutines,
	}
}

// Total is heap plus stack growth in bytes.
func (d MemDelta) Total() int64 { return d.Heap + d.Stack }

// goroutineCensus counts this process's goroutines by the function each
// one was started with (the bottom of its stack, runtime frames skipped),
// from the goroutine profile.
func goroutineCensus() map[string]int {
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		return nil
	}
	census := map[string]int{}
	// The profile is groups of goroutines with the same stack: a line
	// "N @ pc pc ..." and then one "#\tpc\tfunc+off\tfile:line" line per
	// frame, innermost first.
	n, entry := 0, ""
	flush := func() {
		if n > 0 {
			if entry == "" {
				entry = "(runtime)"
			}
			census[entry] += n
		}
		n, entry = 0, ""
	}
	for _, l := range strings.Split(b.String(), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && f[1] == "@":
			flush()
			n, _ = strconv.Atoi(f[0])
		case len(f) >= 3 && f[0] == "#" && n > 0:
			fn, _, _ := strings.Cut(f[2], "+0x")
			if !strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "internal/") {
				entry = fn // keep the outermost: the goroutine's start function
			}
		}
	}
	flush()
	return census
}

// censusDelta is after - before per entry function, keeping positive
// growth only.
func censusDelta(after, before map[string]int) map[string]int {
	d := map[string]int{}
	for k, v := range after {
		if g := v - before[k]; g > 0 {
			d[k] = g
		}
	}
	return d
}
