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
// DEFAULT lease TTL (15 s). The leases Redis still counts for a gateway
// (those of its calls and those it keeps idle for its next calls) stay
// usable by it: calls go on through the loss, long before a lease could
// lapse (the grants counted below all come within the first LeaseTTL
// after the loss), and neither the limit nor a gateway's count in Redis is
// exceeded. A release on its way at the loss is not counted: a busy
// gateway keeps its part of the limit instead of releasing it, so it is
// never left with releases only.
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
			// The load goes on for 6 s after the loss, so that a gateway
			// left without a lease shows as a gap of 4 s or more.
			time.Sleep(time.Until(lost.Add(6 * time.Second)))
			end := time.Now()
			last.Range(func(_, v any) bool { // a gap still going on counts
				if g := int64(end.Sub(v.(time.Time))); g > maxGap.Load() {
					maxGap.Store(g)
				}
				return true
			})
			close(stop)
			wg.Wait()
			// The detection time (2 s: the operation time-out) plus 2 s
			// of margin for a loaded 2-core machine under -race; waiting
			// for leases to lapse would take a whole TTL.
			if gap := time.Duration(maxGap.Load()); gap > 4*time.Second {
				t.Errorf("Redis %s: a gateway granted nothing for %v", how, gap.Round(time.Millisecond))
			}
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

// acquireWithin acquires a lease of c within d, or returns the error.
func acquireWithin(c *cluster.Coordinator, d time.Duration) (pool.Permit, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Acquire(ctx, replica, pool.PriorityNormal)
}

// contendedPair starts two gateways at the default settings on srv with
// limit: "g" holds held leases, "o" holds the rest and has one more
// caller waiting (in the Redis queue), and g has seen it wait. It returns
// g, g's permits and o's waiting caller's result.
func contendedPair(t *testing.T, srv *redistest.Server, limit, held int) (*cluster.Coordinator, []pool.Permit, <-chan error) {
	t.Helper()
	g := defaultGateway(t, srv.Addr, "g", limit)
	o := defaultGateway(t, srv.Addr, "o", limit)
	var ps []pool.Permit
	for range held {
		p, err := acquireWithin(g, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for range limit - held {
		if _, err := acquireWithin(o, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	waited := make(chan error, 1)
	go func() {
		p, err := acquireWithin(o, 30*time.Second)
		if err == nil {
			p.Release()
		}
		waited <- err
	}()
	waitUntil(t, "g to see o waiting", func() bool { return g.Rivals(replica) == 1 })
	return g, ps, waited
}

// TestRedisLossReleaseInFlightNotCounted: a release sent to Redis and not
// acknowledged when Redis is lost is not counted as held: Redis may have
// applied it and granted the slot to a gateway waiting for it. g holds all
// 4 slots while o waits, so g keeps 2 (its part) and sends 2 back; Redis
// hangs before it answers. Within the lease TTL, g runs at most the 2 it
// kept. Before, it counted the 2 releases on their way as still held and
// took a 3rd and a 4th lease while o could hold those slots (7 calls ran
// against a limit of 6 once under load).
func TestRedisLossReleaseInFlightNotCounted(t *testing.T) {
	srv := redistest.StartServer(t)
	const limit = 4
	g, ps, waited := contendedPair(t, srv, limit, limit)
	srv.Freeze()
	defer srv.Thaw()
	ps[0].Release() // beyond g's part: sent to the hung Redis
	ps[1].Release()
	waitUntil(t, "g to notice the loss", func() bool { return !g.RedisUp() })
	if p, err := acquireWithin(g, time.Second); err == nil {
		p.Release()
		t.Fatal("g took a 3rd lease while Redis was hung: it counted a release on its way to Redis as held")
	}
	// Its own 2 kept leases stay usable.
	ps[2].Release()
	p, err := acquireWithin(g, time.Second)
	if err != nil {
		t.Fatalf("g reusing a lease Redis counts for it: %v", err)
	}
	p.Release()
	ps[3].Release()
	srv.Thaw()
	if err := <-waited; err != nil {
		t.Errorf("o's waiting caller after Redis came back: %v", err)
	}
}

// TestBusyGatewayKeepsItsPart: while another gateway waits, a gateway
// whose callers wait keeps its part of the limit and hands a freed lease
// straight to its next caller, so a lost Redis does not stop it: with
// Redis hung, g's waiting caller gets g's freed lease at once. Before, a
// lease freed while others waited went back to Redis first: the caller
// waited for the loss to be noticed (2 s), and when the gateway counted
// only unsent releases, for the whole lease TTL.
func TestBusyGatewayKeepsItsPart(t *testing.T) {
	srv := redistest.StartServer(t)
	const limit = 2
	g, ps, waited := contendedPair(t, srv, limit, 1)
	next := make(chan error, 1)
	go func() {
		p, err := acquireWithin(g, 30*time.Second)
		if err == nil {
			p.Release()
		}
		next <- err
	}()
	time.Sleep(300 * time.Millisecond) // g's second caller waits (its queue place too)
	srv.Freeze()
	defer srv.Thaw()
	freed := time.Now()
	ps[0].Release()
	select {
	case err := <-next:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("g's waiting caller got the freed lease %v after the release, Redis hung", time.Since(freed))
	case <-time.After(time.Second):
		t.Fatal("g's waiting caller did not get g's freed lease within 1 s of the release while Redis was hung")
	}
	srv.Thaw()
	if err := <-waited; err != nil {
		t.Errorf("o's waiting caller after Redis came back: %v", err)
	}
}
