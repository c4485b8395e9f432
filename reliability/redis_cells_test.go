package reliability_test

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// limitWatch measures a fault of the cluster's Redis: the witnesses'
// peaks against the limit, the calls the load got meanwhile and the
// longest stretch in which no call completed.
type limitWatch struct {
	start              time.Time
	took               time.Duration
	results0, served   int
	peakTotal, peakOne int

	mu      sync.Mutex
	gap     time.Duration
	stop    chan struct{}
	stopped chan struct{}
}

func (e *env) watchLimit() *limitWatch {
	for _, r := range e.reps {
		r.w.reset()
	}
	w := &limitWatch{start: time.Now(), results0: e.tallyResults(), stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		last, lastAt := w.results0, time.Now()
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if n := e.tallyResults(); n != last {
				last, lastAt = n, time.Now()
			}
			w.mu.Lock()
			w.gap = max(w.gap, time.Since(lastAt))
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *limitWatch) end(e *env) {
	close(w.stop)
	<-w.stopped
	w.took = time.Since(w.start)
	w.served = e.tallyResults() - w.results0
	for _, r := range e.reps {
		total, one := r.w.peaks()
		w.peakTotal = max(w.peakTotal, total)
		w.peakOne = max(w.peakOne, one)
	}
}

// maxRedisGap bounds the longest stretch without a completed call while
// the cluster's Redis fails: the detection time (an operation slower than
// 2 s counts as a loss) plus 2 s of margin for the shared 2-core machine;
// a gateway waiting for its leases to lapse shows a whole lease TTL (15 s).
const maxRedisGap = 4 * time.Second

// checkGap fails r when no call completed for longer than maxRedisGap
// while Redis failed over.
func (w *limitWatch) checkGap(r *result) {
	if w.gap > maxRedisGap {
		r.fail("no call completed for %v (bound %v)", w.gap.Round(10*time.Millisecond), maxRedisGap)
	}
}

// check fails r when a replica ran more calls at once than the limit and
// describes the figures.
func (w *limitWatch) check(e *env, r *result) string {
	if w.peakTotal > e.limit {
		r.fail("a replica ran %d calls at once, the limit is %d", w.peakTotal, e.limit)
	}
	return fmt.Sprintf("over the %v of the fault: at most %d calls at once on a replica (limit %d; %d through one gateway), %d calls served, longest stretch without a completed call %v.",
		w.took.Round(10*time.Millisecond), w.peakTotal, e.limit, w.peakOne, w.served, w.gap.Round(10*time.Millisecond))
}

// redisCells are the opt-in cells of issue 23: the Redis topologies people
// run failing over, a hung Redis, a dead gateway in the queue and an ACL
// user without channel permission. Each starts real redis-server
// processes (internal/redistest).
func redisCells() []cell {
	var (
		sentinels   *redistest.Sentinels
		redisCl     *redistest.Cluster
		failedOver  time.Duration
		watch       *limitWatch
		deadProxy   *toxiproxy.Proxy
		aclErr      error
		aclPassword = "n0chanPassw0rd"
	)
	failover := func(f func(context.Context)) func(e *env) func() {
		return func(e *env) func() {
			watch = e.watchLimit()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			f(ctx)
			failedOver = time.Since(start)
			return func() { watch.end(e) }
		}
	}
	return []cell{
		{name: "Redis hung", optIn: true, cluster: true,
			fault:  "two gateways sharing a real redis-server (default lease TTL, 15 s); Redis frozen (SIGSTOP: connections open, no replies) under load, then resumed",
			inject: redisLost("Redis hung", (*redistest.Server).Freeze, (*redistest.Server).Thaw),
			check:  checkRedisDown},
		{name: "Sentinel failover", optIn: true,
			fault: "three gateways on a primary + replica + 3 Sentinels (redis://…?master_name=…); SENTINEL FAILOVER under load",
			env: func(t testing.TB, ec *envConfig) {
				sentinels = redistest.StartSentinels(t, "gpmaster")
				addrs := sentinels.Addrs()
				ec.redisURL = "redis://" + addrs[0] + "?master_name=gpmaster&addr=" + strings.Join(addrs[1:], "&addr=")
				ec.gateways = 3
			},
			inject: func(e *env) func() { return failover(sentinels.FailOver)(e) },
			check: func(e *env, r *result) string {
				watch.checkGap(r)
				return fmt.Sprintf("the Sentinels named the new primary %v after SENTINEL FAILOVER; %s", failedOver.Round(10*time.Millisecond), watch.check(e, r))
			}},
		{name: "Cluster slot-owner failover", optIn: true,
			fault: "three gateways on a 3-master Redis Cluster (seed URL); the master owning the deployment's slot killed, its replica elected under load, then the killed node started again (it rejoins as the new master's replica)",
			env: func(t testing.TB, ec *envConfig) {
				redisCl = redistest.StartCluster(t, "{reliability}")
				seeds := redisCl.Seeds()
				ec.redisURL = "redis://" + seeds[0] + "?addr=" + strings.Join(seeds[1:], "&addr=")
				ec.gateways = 3
			},
			inject: func(e *env) func() { return failover(redisCl.FailOver)(e) },
			check: func(e *env, r *result) string {
				watch.checkGap(r)
				return fmt.Sprintf("the replica was master, the cluster ok and the killed node back as its replica %v after the kill; %s", failedOver.Round(10*time.Millisecond), watch.check(e, r))
			}},
		{name: "dead gateway in the queue", optIn: true,
			fault: "three gateways on one redis-server (default lease TTL, 15 s), 2 sessions per replica, so that callers queue; gateway 1 loses Redis (its link cut) and its callers at once, like SIGKILL (no release, no heartbeat; on_redis_loss fail_closed, so it runs nothing more)",
			env: func(t testing.TB, ec *envConfig) {
				ec.redis = redistest.StartServer(t)
				ec.gateways = 3
				ec.maxSessions = 2
				deadProxy = toxiproxy.NewProxy(toxiServer, t.Name()+"-redis", "127.0.0.1:0", ec.redis.Addr)
				if err := deadProxy.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(deadProxy.Stop)
				ec.gateway = func(i int, cfg *gateway.Config) {
					cfg.Pool.MinConnections = 1
					if i == 0 {
						cfg.Secrets.RedisURL = "redis://" + deadProxy.Listen + "/0"
						cfg.Cluster.OnRedisLoss = "fail_closed"
					}
				}
			},
			inject: func(e *env) func() {
				watch = e.watchLimit()
				e.down[0].Store(true)
				deadProxy.Stop()
				return func() {
					watch.end(e)
					if err := deadProxy.Start(); err != nil {
						e.t.Errorf("restarting gateway 1's link to Redis: %v", err)
					}
					e.down[0].Store(false)
				}
			},
			check: func(e *env, r *result) string {
				// Issue 23 item 3: a dead gateway's queue place stops blocking
				// the others within ~1 s, whatever it held; the lease TTL is
				// what it took before.
				if ttl := cmp.Or(e.cfg.Cluster.LeaseTTL, cluster.DefaultLeaseTTL); watch.gap >= ttl {
					r.fail("no call completed for %v after a gateway died (lease TTL %v)", watch.gap.Round(10*time.Millisecond), ttl)
				}
				return "the two live gateways, " + watch.check(e, r)
			}},
		{name: "ACL user without channel permission", optIn: true, cluster: true,
			fault: "two gateways serve on a real redis-server; a third starts with Redis 7's default rule for a new user (~{reliability}:* +@all -@dangerous, no channel)",
			inject: func(e *env) func() {
				watch = e.watchLimit()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				admin := redis.NewClient(&redis.Options{Addr: e.redis.Addr, DisableIdentity: true})
				defer admin.Close()
				if err := admin.Do(ctx, "ACL", "SETUSER", "nochan", "on", ">"+aclPassword, "~{reliability}:*", "+@all", "-@dangerous").Err(); err != nil {
					e.t.Fatalf("ACL SETUSER: %v", err)
				}
				cfg := e.cfg
				cfg.Secrets.RedisURL = "redis://nochan:" + aclPassword + "@" + e.redis.Addr + "/0"
				gw, err := gateway.Open(ctx, cfg, e.logger, gradio.WithHeaderTimeout(3*time.Second))
				aclErr = err
				if err == nil {
					_ = gw.Close(ctx)
				}
				return func() { watch.end(e) }
			},
			check: func(e *env, r *result) string {
				switch {
				case aclErr == nil:
					r.fail("a gateway whose Redis user has no channel permission started")
					return watch.check(e, r)
				case strings.Contains(aclErr.Error(), aclPassword):
					r.fail("the start error shows the Redis password")
				case !strings.Contains(aclErr.Error(), "&{reliability}:*"):
					r.fail("the start error does not name the channel rule &{reliability}:*: %v", aclErr)
				}
				return fmt.Sprintf("the third gateway's start was refused: %q; the two others, %s", clip(aclErr.Error()), watch.check(e, r))
			}},
	}
}

// redisLost stops the cluster's Redis with stop under load, waits until
// every gateway works on its local share and starts measuring the calls
// each replica runs at once, per gateway and in total. Healing runs start.
func redisLost(what string, stop, start func(*redistest.Server)) func(e *env) func() {
	return func(e *env) func() {
		e.outage.what = what
		gaps := e.watchLimit() // for its gap only: the peaks are measured below
		began := time.Now()
		stop(e.redis)
		for !e.redisUp(false) {
			if time.Since(began) > 10*time.Second {
				e.t.Errorf("the gateways did not notice %s within 10 s", what)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		e.outage.noticed = time.Since(began)
		e.t.Logf("%s at %s, noticed after %v", what, began.Format("15:04:05.000"), e.outage.noticed)
		// Calls admitted before the outage may still run (a gateway that held
		// more than its share keeps them: a documented limit of pool/cluster);
		// once they ended only calls admitted under the local shares run.
		time.Sleep(200 * time.Millisecond)
		for _, r := range e.reps {
			r.w.reset()
		}
		e.outage.results0 = e.tallyResults()
		return func() {
			close(gaps.stop)
			<-gaps.stopped
			e.outage.gap = gaps.gap
			for _, r := range e.reps {
				total, one := r.w.peaks()
				e.outage.peakTotal = max(e.outage.peakTotal, total)
				e.outage.peakOne = max(e.outage.peakOne, one)
				r.w.reset()
			}
			e.outage.served = e.tallyResults() - e.outage.results0
			start(e.redis)
			e.outage.restarted = time.Now()
		}
	}
}
