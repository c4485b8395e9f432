package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// TestRedisOutage stops Redis under load and starts it again (empty):
// every call still gets its permit; while Redis is lost each gateway stays
// within its local share (limit / 3); after the restart the limit is global
// again, and it held during the rejoin, when the gateways came back one by
// one.
func TestRedisOutage(t *testing.T) {
	srv := redistest.StartServer(t)
	const limit, ttl = 6, 600 * time.Millisecond
	f := newInflight()
	stop := map[string]chan struct{}{}
	var wg sync.WaitGroup
	var errs atomic.Int64
	gws := map[string]*cluster.Coordinator{}
	for i := range 3 {
		id := fmt.Sprintf("g%d", i)
		gws[id] = gateway(t, srv.Addr, id, limit, ttl)
		stop[id] = make(chan struct{})
	}
	waitUntil(t, "every gateway to see the others", func() bool {
		for _, c := range gws {
			if c.Stats(context.Background()).GatewaysAlive != 3 {
				return false
			}
		}
		return true
	})
	for id, c := range gws {
		load(c, id, limit, time.Millisecond, f, stop[id], &errs, &wg)
	}
	grants := func() int { _, _, _, n := f.snapshot(); return n }
	waitUntil(t, "300 grants", func() bool { return grants() >= 300 })
	if peak, _, _, _ := f.snapshot(); peak > limit {
		t.Errorf("Redis up: %d in flight, limit %d", peak, limit)
	}

	srv.Stop()
	f.resetPeaks()
	waitUntil(t, "every gateway to notice", func() bool {
		for _, c := range gws {
			if c.RedisUp() {
				return false
			}
		}
		return true
	})
	entryPeak, _, _, _ := f.snapshot()
	// Calls admitted before the outage may still run; a millisecond later
	// only calls admitted under the local shares do.
	time.Sleep(20 * time.Millisecond)
	f.resetPeaks()
	n0 := grants()
	waitUntil(t, "300 grants without Redis", func() bool { return grants() >= n0+300 })
	peak, gwPeak, _, _ := f.snapshot()
	for id, p := range gwPeak {
		if p > limit/3 {
			t.Errorf("Redis lost: gateway %s had %d in flight, its share is %d", id, p, limit/3)
		}
	}
	if peak > limit {
		t.Errorf("Redis lost: %d in flight, limit %d", peak, limit)
	}

	f.resetPeaks()
	srv.Start()
	restarted := time.Now()
	back := map[string]time.Duration{}
	waitUntil(t, "every gateway to rejoin", func() bool {
		all := true
		for id, c := range gws {
			if !c.RedisUp() {
				all = false
			} else if _, ok := back[id]; !ok {
				back[id] = time.Since(restarted)
			}
		}
		return all
	})
	t.Logf("rejoined after %v", back)
	n0 = grants()
	waitUntil(t, "300 grants after the restart", func() bool { return grants() >= n0+300 })
	if peak, gp, _, _ := f.snapshot(); peak > limit {
		t.Errorf("rejoin: %d in flight, limit %d; per gateway %v\n%s", peak, limit, gp, debugLog.b)
	}
	// The limit is global again: one gateway alone may take all of it.
	close(stop["g1"])
	close(stop["g2"])
	f.resetPeaks()
	waitUntil(t, "g0 alone to hold the whole limit", func() bool {
		_, gp, _, _ := f.snapshot()
		return gp["g0"] == limit
	})
	close(stop["g0"])
	wg.Wait()
	if errs.Load() > 0 {
		t.Errorf("%d acquires failed (lost calls)", errs.Load())
	}
	t.Logf("in flight when all three had noticed the outage: %d (limit %d)", entryPeak, limit)
}
