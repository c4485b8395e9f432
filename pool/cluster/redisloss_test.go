package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// TestRedisLossNoStallDefaultTTL: Redis killed, or hung, under load at the
// DEFAULT lease TTL (15 s). The leases Redis still counts for a gateway,
// the releases on their way there included, stay usable by it: calls go
// on once the loss is noticed, long before a lease could lapse (the grants
// counted below all come within the first LeaseTTL after the loss), and
// neither the limit nor a gateway's count in Redis is exceeded. Before,
// the releases on their way were not counted: under load a gateway held
// "0" at the loss and no call ran for a whole LeaseTTL (16-17 s).
func TestRedisLossNoStallDefaultTTL(t *testing.T) {
	for _, how := range []string{"killed", "hung"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.StartServer(t)
			const limit = 6
			f := newInflight()
			var wg sync.WaitGroup
			var errs atomic.Int64
			stop := make(chan struct{})
			gws := map[string]*cluster.Coordinator{}
			for i := range 2 {
				id := fmt.Sprintf("g%d", i)
				gws[id] = defaultGateway(t, srv.Addr, id, limit)
			}
			waitUntil(t, "both gateways to see each other", func() bool {
				for _, c := range gws {
					if c.Stats(context.Background()).GatewaysAlive != 2 {
						return false
					}
				}
				return true
			})
			var last sync.Map // gateway -> time of its last grant
			var maxGap atomic.Int64
			for id, c := range gws {
				// More callers than the limit: contended, as under load.
				loadGap(c, id, limit, 20*time.Millisecond, f, stop, &errs, &wg, &last, &maxGap)
			}
			grants := func() int { _, _, _, n := f.snapshot(); return n }
			waitUntil(t, "200 grants", func() bool { return grants() >= 200 })
			maxGap.Store(0)
			lost := time.Now()
			if how == "killed" {
				srv.Stop()
			} else {
				srv.Freeze()
				defer srv.Thaw()
			}
			f.resetPeaks()
			waitUntil(t, "both gateways to notice", func() bool {
				for _, c := range gws {
					if c.RedisUp() {
						return false
					}
				}
				return true
			})
			noticed := time.Since(lost)
			n0 := grants()
			waitUntil(t, "200 grants without Redis", func() bool { return grants() >= n0+200 })
			within := time.Since(lost)
			close(stop)
			wg.Wait()
			if within >= cluster.DefaultLeaseTTL {
				t.Errorf("200 grants without Redis took %v from the loss: the gateways waited for their leases to lapse (LeaseTTL %v)", within, cluster.DefaultLeaseTTL)
			}
			peak, gwPeak, _, _ := f.snapshot()
			if peak > limit {
				t.Errorf("Redis %s: %d in flight, limit %d", how, peak, limit)
			}
			if errs.Load() > 0 {
				t.Errorf("%d acquires failed", errs.Load())
			}
			t.Logf("Redis %s: noticed after %v; 200 grants %v after the loss; longest gap between grants of one gateway %v; peak %d (per gateway %v), limit %d",
				how, noticed.Round(time.Millisecond), within.Round(time.Millisecond), time.Duration(maxGap.Load()).Round(time.Millisecond), peak, gwPeak, limit)
		})
	}
}

// defaultGateway is a Coordinator at the default settings (lease TTL,
// time-outs) over the client the gateway makes (cluster.NewClient).
func defaultGateway(t *testing.T, addr, id string, limit int) *cluster.Coordinator {
	t.Helper()
	rdb, _, err := cluster.NewClient("redis://"+addr, cluster.TLSFiles{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	c, err := cluster.New(context.Background(), cluster.Config{
		Client: rdb, Name: "test", Limit: limit, Replicas: []string{replica}, GatewayID: id,
		Logger: slog.New(slog.NewTextHandler(&debugLog, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// loadGap is load that also records the longest time between two grants
// of one gateway.
func loadGap(c *cluster.Coordinator, gw string, n int, hold time.Duration, f *inflight, stop <-chan struct{}, errs *atomic.Int64, wg *sync.WaitGroup, last *sync.Map, maxGap *atomic.Int64) {
	last.Store(gw, time.Now())
	var mu sync.Mutex
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				p, err := c.Acquire(ctx, replica, pool.PriorityNormal)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				mu.Lock()
				now := time.Now()
				v, _ := last.Load(gw)
				if g := int64(now.Sub(v.(time.Time))); g > maxGap.Load() {
					maxGap.Store(g)
				}
				last.Store(gw, now)
				mu.Unlock()
				f.enter(gw)
				time.Sleep(hold)
				f.leave(gw)
				p.Release()
			}
		})
	}
}
