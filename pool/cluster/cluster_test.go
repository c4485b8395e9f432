package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const replica = "space_1"

func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true,
		DialTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

// gateway starts one Coordinator (one simulated gateway) on addr.
func gateway(t *testing.T, addr, id string, limit int, ttl time.Duration) *cluster.Coordinator {
	t.Helper()
	c, err := cluster.New(context.Background(), cluster.Config{
		Client: newClient(t, addr), Name: "test", LeaseTTL: ttl, Limit: limit,
		Replicas: []string{replica}, GatewayID: id, Logger: slog.New(slog.NewTextHandler(&debugLog, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// inflight is the witness: calls holding a permit right now, and the most
// ever seen, globally and per gateway.
type inflight struct {
	mu      sync.Mutex
	now     int
	peak    int
	gwNow   map[string]int
	gwPeak  map[string]int
	granted map[string]int
	total   int
}

func newInflight() *inflight {
	return &inflight{gwNow: map[string]int{}, gwPeak: map[string]int{}, granted: map[string]int{}}
}

func (f *inflight) enter(gw string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now++
	f.peak = max(f.peak, f.now)
	f.gwNow[gw]++
	f.gwPeak[gw] = max(f.gwPeak[gw], f.gwNow[gw])
	f.granted[gw]++
	f.total++
}

func (f *inflight) leave(gw string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now--
	f.gwNow[gw]--
}

func (f *inflight) resetPeaks() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peak = f.now
	for g := range f.gwPeak {
		f.gwPeak[g] = f.gwNow[g]
	}
}

func (f *inflight) snapshot() (peak int, gwPeak map[string]int, granted map[string]int, total int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	gp, gr := map[string]int{}, map[string]int{}
	for k, v := range f.gwPeak {
		gp[k] = v
	}
	for k, v := range f.granted {
		gr[k] = v
	}
	return f.peak, gp, gr, f.total
}

// load runs n callers on c until stop is closed: acquire, hold, release.
// Errors are counted (a lost call).
func load(c *cluster.Coordinator, gw string, n int, hold time.Duration, f *inflight, stop <-chan struct{}, errs *atomic.Int64, wg *sync.WaitGroup) {
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				p, err := c.Acquire(ctx, replica, pool.PriorityNormal)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				f.enter(gw)
				time.Sleep(hold)
				f.leave(gw)
				p.Release()
			}
		})
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGlobalLimit: three gateways with 10 callers each never hold more
// than the limit together.
func TestGlobalLimit(t *testing.T) {
	addr := redistest.Start(t)
	f := newInflight()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var errs atomic.Int64
	for i := range 3 {
		id := fmt.Sprintf("g%d", i)
		load(gateway(t, addr, id, 4, 2*time.Second), id, 10, time.Millisecond, f, stop, &errs, &wg)
	}
	waitUntil(t, "600 grants", func() bool { _, _, _, n := f.snapshot(); return n >= 600 })
	close(stop)
	wg.Wait()
	peak, _, granted, _ := f.snapshot()
	if peak > 4 {
		t.Errorf("%d calls in flight at once, limit 4", peak)
	}
	if errs.Load() > 0 {
		t.Errorf("%d acquires failed", errs.Load())
	}
	t.Logf("peak %d, grants per gateway %v", peak, granted)
}

// TestFairAcrossGateways proves that no gateway starves: gateway "big"
// has 24 callers, "small1" and "small2" two each, all always waiting for
// a limit of 2. Racing for free slots would give the small ones about
// 2/28 of the grants each; the Redis queue serves waiting gateways round
// robin, so each gets about a third. And no small caller waits for more
// than a bounded number of grants to others.
func TestFairAcrossGateways(t *testing.T) {
	addr := redistest.Start(t)
	var mu sync.Mutex
	var order []string // grants in order
	maxOthers := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	run := func(c *cluster.Coordinator, gw string, n int) {
		for range n {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					before := len(order)
					mu.Unlock()
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					p, err := c.Acquire(ctx, replica, pool.PriorityNormal)
					cancel()
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					others := 0
					for _, g := range order[before:] {
						if g != gw {
							others++
						}
					}
					maxOthers[gw] = max(maxOthers[gw], others)
					order = append(order, gw)
					mu.Unlock()
					time.Sleep(time.Millisecond)
					p.Release()
				}
			})
		}
	}
	run(gateway(t, addr, "big", 2, 2*time.Second), "big", 24)
	run(gateway(t, addr, "small1", 2, 2*time.Second), "small1", 2)
	run(gateway(t, addr, "small2", 2, 2*time.Second), "small2", 2)
	waitUntil(t, "900 grants", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) >= 900 })
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	// Skip the start-up, when the gateways were not all waiting yet.
	count := map[string]int{}
	for _, g := range order[100:] {
		count[g]++
	}
	n := len(order) - 100
	for _, g := range []string{"small1", "small2"} {
		if share := float64(count[g]) / float64(n); share < 0.2 {
			t.Errorf("%s got %.0f%% of the grants (%v), want about a third", g, 100*share, count)
		}
		// A small gateway's caller waits behind its own other caller and
		// then at most one turn of each other gateway per slot.
		if maxOthers[g] > 12 {
			t.Errorf("a caller of %s waited while %d grants went to others", g, maxOthers[g])
		}
	}
	t.Logf("grants after warm-up %v of %d; most grants to others during one wait %v", count, n, maxOthers)
}

// TestDeadGatewayLeasesExpire: a gateway that dies holding every slot
// blocks the others only until its leases expire (one lease TTL).
func TestDeadGatewayLeasesExpire(t *testing.T) {
	addr := redistest.Start(t)
	const ttl = 400 * time.Millisecond
	dead := gateway(t, addr, "dead", 2, ttl)
	live := gateway(t, addr, "live", 2, ttl)
	for range 2 {
		if _, err := dead.Acquire(context.Background(), replica, pool.PriorityNormal); err != nil {
			t.Fatal(err)
		}
	}
	dead.Abandon()
	rdb := newClient(t, addr)
	if n := rdb.ZCard(context.Background(), "{test}:sem:"+replica+":h").Val(); n != 2 {
		t.Fatalf("%d leases in Redis after the crash, want the dead gateway's 2", n)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := live.Acquire(ctx, replica, pool.PriorityNormal)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	p.Release()
	t.Logf("the dead gateway's slot was free after %v (lease TTL %v)", took, ttl)
}

// TestAcquireErrors: the waiter list bound, a context that ends, Close.
func TestAcquireErrors(t *testing.T) {
	addr := redistest.Start(t)
	c, err := cluster.New(context.Background(), cluster.Config{Client: newClient(t, addr), Name: "errs", Limit: 1, MaxWaiters: 1, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	held, err := c.Acquire(context.Background(), replica, pool.PriorityNormal)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancelWait := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { _, err := c.Acquire(waitCtx, replica, pool.PriorityNormal); waited <- err }()
	waitUntil(t, "one waiter", func() bool { return c.Waiting(replica) == 1 })
	if _, err := c.Acquire(context.Background(), replica, pool.PriorityNormal); !errors.Is(err, pool.ErrQueueFull) {
		t.Errorf("second waiter: %v, want ErrQueueFull", err)
	}
	cancelWait()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter: %v", err)
	}
	go func() { _, err := c.Acquire(context.Background(), replica, pool.PriorityNormal); waited <- err }()
	waitUntil(t, "one waiter", func() bool { return c.Waiting(replica) == 1 })
	held.Release()
	held.Release() // harmless
	if err := <-waited; err != nil {
		t.Errorf("waiter after a release: %v", err)
	}
	go func() { _, err := c.Acquire(context.Background(), replica, pool.PriorityNormal); waited <- err }()
	waitUntil(t, "one waiter", func() bool { return c.Waiting(replica) == 1 })
	c.Close(context.Background())
	if err := <-waited; !errors.Is(err, cluster.ErrClosed) {
		t.Errorf("waiter at Close: %v", err)
	}
	for _, cfg := range []cluster.Config{
		{Limit: 1},
		{Client: newClient(t, addr)},
		{Client: newClient(t, addr), Limit: 1, Name: "bad name"},
		{Client: newClient(t, addr), Limit: 1, LeaseTTL: time.Millisecond},
	} {
		if _, err := cluster.New(context.Background(), cfg); err == nil {
			t.Errorf("New(%+v) accepted a bad config", cfg)
		}
	}
}

var debugLog logbuf

type logbuf struct {
	mu sync.Mutex
	b  []byte
}

func (l *logbuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

// TestPriorityClasses: the local waiter list serves pool.WithPriority's
// classes as the session pool does: high first, FIFO within a class.
func TestPriorityClasses(t *testing.T) {
	addr := redistest.Start(t)
	c, err := cluster.New(context.Background(), cluster.Config{Client: newClient(t, addr), Name: "prio", Limit: 1, LeaseTTL: time.Second, PriorityMaxWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	held, err := c.Acquire(context.Background(), replica, pool.PriorityNormal)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, p := range []pool.Priority{pool.PriorityLow, pool.PriorityNormal, pool.PriorityHigh, pool.PriorityNormal} {
		wg.Go(func() {
			pm, err := c.Acquire(context.Background(), replica, p)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, fmt.Sprintf("%s%d", p, i))
			mu.Unlock()
			pm.Release()
		})
		waitUntil(t, "the waiter", func() bool { return c.Waiting(replica) == i+1 })
	}
	held.Release()
	wg.Wait()
	if got := fmt.Sprint(order); got != "[high2 normal1 normal3 low0]" {
		t.Errorf("served in the order %s", got)
	}
}

// TestDeadGatewayFirstInQueue: a gateway killed while first in a
// replica's queue (holding no lease) stops blocking the others once its
// place lapses (ten poll intervals, 1 s), not after a lease TTL (10 s
// here): limit 1, "live" holds the slot, "dead" then "other" wait in that
// order, "dead" is killed, "live" releases.
func TestDeadGatewayFirstInQueue(t *testing.T) {
	addr := redistest.Start(t)
	const ttl = 10 * time.Second
	live := gateway(t, addr, "live", 1, ttl)
	dead := gateway(t, addr, "dead", 1, ttl)
	other := gateway(t, addr, "other", 1, ttl)
	held, err := live.Acquire(context.Background(), replica, pool.PriorityNormal)
	if err != nil {
		t.Fatal(err)
	}
	admin := newClient(t, addr)
	queue := func() []string {
		return admin.ZRange(context.Background(), "{test}:sem:"+replica+":q", 0, -1).Val()
	}
	deadErr := make(chan error, 1)
	go func() { _, err := dead.Acquire(context.Background(), replica, pool.PriorityNormal); deadErr <- err }()
	waitUntil(t, "dead in the queue", func() bool { return len(queue()) == 1 })
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ttl/2)
		defer cancel()
		p, err := other.Acquire(ctx, replica, pool.PriorityNormal)
		if err == nil {
			p.Release()
		}
		got <- err
	}()
	waitUntil(t, "other behind dead", func() bool { return fmt.Sprint(queue()) == "[dead other]" })
	dead.Abandon()
	if err := <-deadErr; !errors.Is(err, cluster.ErrClosed) {
		t.Errorf("the killed gateway's waiter: %v", err)
	}
	start := time.Now()
	held.Release()
	if err := <-got; err != nil {
		t.Fatalf("other did not get the free slot within half a lease TTL: %v (queue %v)", err, queue())
	}
	t.Logf("other got the slot %v after the release (lease TTL %v)", time.Since(start), ttl)
}
