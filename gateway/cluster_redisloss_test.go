package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// TestRedisLossUnderLoadDefaultTTL: two gateways share one replica's
// limit through a real redis-server at the DEFAULT lease TTL (15 s), under
// more callers than the limit (each gateway busy, the gateways waiting for
// each other). Redis is killed, or hung (SIGSTOP), and the load goes on
// for a while. The replica's own count of the calls it runs never exceeds
// the limit, and neither gateway goes longer than the detection time
// (cluster: an operation slower than 2 s counts as a loss) plus a margin
// without a call completing. Before, a gateway counted its releases on
// their way to Redis as still held at the loss (7 calls ran against a
// limit of 6 once under load: Redis had applied a release and granted the
// slot to the other gateway), and counting only the releases not yet sent
// left a gateway whose leases were all on their way with nothing for a
// whole lease TTL (16-17 s without a call).
func TestRedisLossUnderLoadDefaultTTL(t *testing.T) {
	for _, how := range []string{"killed", "hung"} {
		t.Run(how, func(t *testing.T) { redisLossUnderLoad(t, how) })
	}
}

// lossWitness is the replica's count of the calls it runs at once.
type lossWitness struct {
	mu            sync.Mutex
	running, peak int
}

func (w *lossWitness) enter() {
	w.mu.Lock()
	w.running++
	w.peak = max(w.peak, w.running)
	w.mu.Unlock()
}

func (w *lossWitness) leave() {
	w.mu.Lock()
	w.running--
	w.mu.Unlock()
}

func (w *lossWitness) resetPeak() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.peak
	w.peak = w.running
	return p
}

func redisLossUnderLoad(t *testing.T, how string) {
	const (
		limit   = 4
		workers = 6 // per gateway: more than the limit, so both wait
		work    = 20 * time.Millisecond
		// after is how long the load goes on after the loss: beyond the
		// detection time, far below the lease TTL.
		after = 6 * time.Second
		// maxGap bounds the longest stretch without a completed call at
		// one gateway: the detection time (2 s: a user's assignment read
		// waits that long on a hung Redis, then the local copy answers)
		// plus 2 s of margin for a shared 2-core machine running -race
		// beside other tests. A gateway waiting for its leases to lapse
		// would show at least after - 2 s = 4 s here (a whole TTL, 13 s
		// or more, with a longer load), so the bound still catches it.
		maxGap = 4 * time.Second
	)
	w := &lossWitness{}
	app := gradiotest.NewApp()
	app.Handle("work", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		w.enter()
		defer w.leave()
		if err := c.Sleep(ctx, work); err != nil {
			return nil, err
		}
		return []any{"ok"}, nil
	}, nil, nil)
	sim := gradiotest.NewUnstartedServer(app)
	sim.DefaultConcurrencyLimit = -1 // the replica runs all it is given: the gateways are the limit
	sim.Start()
	t.Cleanup(sim.Close)

	rs := redistest.StartServer(t)
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{sim.URL}, MinConnections: 1, MaxConnections: limit, QueueTimeout: 30 * time.Second},
		Cluster: gateway.ClusterConfig{Name: "redisloss"}} // the default lease TTL
	cfg.Secrets.HashKey = "k"
	cfg.Secrets.RedisURL = "redis://" + rs.Addr + "/0"
	urls, gws := openGateways(t, cfg, 2)
	if ttl := cfg.Cluster.LeaseTTL; ttl != 0 {
		t.Fatalf("lease TTL %v, want the default", ttl)
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * workers}}
	t.Cleanup(client.CloseIdleConnections)
	var (
		stop      = make(chan struct{})
		wg        sync.WaitGroup
		completed atomic.Int64
		failed    atomic.Int64
		mu        sync.Mutex
		last      = make([]time.Time, len(urls)) // each gateway's last completed call
		gaps      = make([]time.Duration, len(urls))
		firstErr  string
	)
	for g, url := range urls {
		last[g] = time.Now()
		for i := range workers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequest(http.MethodPost, url+"/v1/predict/work", strings.NewReader(`{"data":["x"]}`))
					req.Header.Set("Content-Type", "application/json")
					if i%2 == 0 { // users read their assignment in Redis; anonymous callers do not
						req.Header.Set(gateway.UserHeader, fmt.Sprintf("user%d-%d@example.com", g, i))
					}
					resp, err := client.Do(req)
					if err == nil {
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							err = fmt.Errorf("%d %s", resp.StatusCode, b)
						}
					}
					now := time.Now()
					mu.Lock()
					if err != nil {
						failed.Add(1)
						if firstErr == "" {
							firstErr = err.Error()
						}
					} else {
						completed.Add(1)
						gaps[g] = max(gaps[g], now.Sub(last[g]))
						last[g] = now
					}
					mu.Unlock()
				}
			})
		}
	}
	var stopOnce sync.Once
	stopLoad := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(stopLoad)

	waitFor := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	// Warm: both gateways serve (and have seen each other, at each
	// acquire) before the loss.
	waitFor("400 calls", 30*time.Second, func() bool { return completed.Load() >= 400 || failed.Load() > 0 })
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d calls failed with Redis up, e.g. %s", n, firstErr)
	}
	mu.Lock()
	for g := range gaps {
		gaps[g] = 0
	}
	mu.Unlock()
	w.resetPeak()
	n0 := completed.Load()
	if how == "killed" {
		rs.Stop()
	} else {
		rs.Freeze()
		t.Cleanup(rs.Thaw) // before the gateways close (cleanups run last first)
	}
	// Each gateway's notice of the loss (gradiopool_redis_up 0).
	lost := time.Now()
	noticed := make([]time.Duration, len(gws))
	for time.Since(lost) < after {
		for g, gw := range gws {
			if noticed[g] == 0 && redisUp(t, gw) == 0 {
				noticed[g] = time.Since(lost)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopLoad()
	end := time.Now()
	served := completed.Load() - n0
	peak := w.resetPeak()
	mu.Lock()
	defer mu.Unlock()
	for g := range gaps {
		gaps[g] = max(gaps[g], end.Sub(last[g])) // a stall still going on at the end counts
	}
	t.Logf("Redis %s: noticed by the gateways after %v; %d calls completed in the %v after the loss; peak %d calls at once at the replica (limit %d); longest stretch without a completed call per gateway %v; %d failed",
		how, noticed, served, after, peak, limit, gaps, failed.Load())
	for g, d := range noticed {
		if d == 0 {
			t.Errorf("gateway %d did not notice the loss within %v (gradiopool_redis_up still 1)", g, after)
		}
	}
	if peak > limit {
		t.Errorf("the replica ran %d calls at once, the limit is %d", peak, limit)
	}
	for g, gap := range gaps {
		if gap > maxGap {
			t.Errorf("gateway %d: no call completed for %v after Redis was %s (bound %v; lease TTL %v)", g, gap.Round(time.Millisecond), how, maxGap, cluster.DefaultLeaseTTL)
		}
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d calls failed, e.g. %s", n, firstErr)
	}
}

// redisUp is gw's gradiopool_redis_up (-1 when it has none).
func redisUp(t *testing.T, gw *gateway.Gateway) float64 {
	t.Helper()
	mfs, err := gw.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gradiopool_redis_up" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
