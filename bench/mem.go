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
	for _, block := range strings.Split(b.String(), "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		n, err := strconv.Atoi(strings.SplitN(lines[0], " ", 2)[0])
		if err != nil {
			continue // the profile's header
		}
		entry := "(runtime)"
		for _, l := range lines[1:] {
			f := strings.Fields(l) // "#", pc, func+off, file:line
			if len(f) < 3 || f[0] != "#" {
				continue
			}
			fn, _, _ := strings.Cut(f[2], "+0x")
			if !strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "internal/") {
				entry = fn // keep the deepest: the goroutine's start function
			}
		}
		census[entry] += n
	}
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
