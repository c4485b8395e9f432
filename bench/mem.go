package bench

import (
	"runtime"
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
