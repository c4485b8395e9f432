package pool_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// peakHeap samples the heap in use while f runs and returns its peak growth
// over the heap before f. A sampler, not a timer: the bound it checks is
// generous (memory, never time).
func peakHeap(f func()) uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > base && ms.HeapInuse-base > peak.Load() {
				peak.Store(ms.HeapInuse - base)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	return peak.Load()
}

// TestHostileReplicaBounded: a replica that sends garbage, a line or an
// event that never ends, or a huge config or join answer offers 1 GiB; the
// call ends with an error of its own (not the caller's deadline) and the
// pool holds a bounded amount of memory meanwhile (the client's line and
// event limit is 64 MiB; without it an endless event grew to 2.3 GB).
func TestHostileReplicaBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("sends up to 1 GiB over loopback per mode")
	}
	const offered = 1 << 30
	const bound = 320 << 20 // the 64 MiB limits, their copies and the race detector's overhead
	for _, tc := range []struct {
		name string
		mode gradiotest.Hostile
	}{
		{"garbage SSE", gradiotest.HostileGarbageSSE},
		{"endless line", gradiotest.HostileEndlessLine},
		{"endless event", gradiotest.HostileEndlessEvent},
		{"huge config", gradiotest.HostileHugeConfig},
		{"huge join answer", gradiotest.HostileHugeJoinAnswer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := gradiotest.NewUnstartedServer(nil)
			srv.Hostile, srv.HostileBytes = tc.mode, offered
			srv.Start()
			defer srv.Close()
			p := newPool(t, pool.Config{Replicas: []string{srv.URL}, MinConnections: -1, MaxConnections: 1, ConnectRetries: -1,
				ClientOptions: []gradio.Option{gradio.WithHeaderTimeout(20 * time.Second)}})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var err error
			grew := peakHeap(func() { _, err = p.Predict(ctx, "", "upper", "x") })
			if err == nil {
				t.Fatal("a hostile replica's call succeeded")
			}
			if ctx.Err() != nil {
				t.Fatalf("the call ended only at the caller's deadline: %v", err)
			}
			if grew > bound {
				t.Errorf("heap grew by %d MiB while the replica offered %d MiB (bound %d MiB): %v", grew>>20, offered>>20, bound>>20, err)
			}
			t.Logf("%v; heap peak +%d MiB", err, grew>>20)
		})
	}
}

// TestHostileReplicaOthersServed: while one replica answers its callers'
// streams with garbage, a user of the other replica is served.
func TestHostileReplicaOthersServed(t *testing.T) {
	bad := gradiotest.NewUnstartedServer(nil)
	bad.Hostile = gradiotest.HostileGarbageSSE
	bad.Start()
	defer bad.Close()
	good := replicas(t, 1)[0]
	p := newPool(t, pool.Config{Replicas: []string{bad.URL, good.URL}, MinConnections: -1})
	ctx := ctxT(t)
	// Round robin pins the first new user to the first replica, the
	// second to the second.
	if _, err := p.Predict(ctx, "victim@example.com", "upper", "x"); err == nil {
		t.Fatal("a call on the hostile replica succeeded")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the victim tries again while the bystander calls
		defer wg.Done()
		if _, err := p.Predict(ctx, "victim@example.com", "upper", "x"); err == nil {
			t.Error("a call on the hostile replica succeeded")
		}
	}()
	for i := range 5 {
		res, err := p.Predict(ctx, "bystander@example.com", "upper", "y")
		if err != nil {
			t.Fatalf("bystander call %d: %v", i, err)
		}
		if res.Replica == bad.Listener.Addr().String() {
			t.Fatalf("bystander routed to the hostile replica")
		}
	}
	wg.Wait()
}
