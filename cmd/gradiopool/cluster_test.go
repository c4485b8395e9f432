package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/redistest"
)

// TestServeCluster runs a real redis-server and three `gradiopool serve`
// processes in front of two simulated replicas, with max_connections 6 (the
// limit of each replica across the three gateways) and 200 registered
// callers spread over the gateways (each call goes to the next gateway).
// The witness of the limit is, in each simulated replica, the handler's
// own count of calls running (exact: raised when a call starts running,
// lowered when it returns, peak kept). The simulator's Running counter is
// sampled too, for the log only: it counts a call until just after its
// completion message is sent, so a slot freed and taken again within
// that moment shows as one call too many. In turn:
//
//  1. Redis up: the limit holds; every user stays on one replica whichever
//     gateway serves them.
//  2. Redis stopped: no call fails; each gateway keeps within its local
//     share (6/3 = 2 calls per replica, from its own pool-stats).
//  3. Redis started again (empty): the gateways rejoin; the limit holds.
//  4. One gateway killed (SIGKILL) while it holds leases: its leases are
//     gone within one lease TTL (1 s) and the two others then use the whole
//     limit, more than their shares: the limit is global again.
func TestServeCluster(t *testing.T) {
	srv := redistest.StartServer(t)
	const limit, share, ttl = 6, 2, time.Second
	var sims []*gradiotest.Server
	var urls []string
	witnesses := make([]*witness, 2)
	for i := range 2 {
		w := &witness{}
		witnesses[i] = w
		app := gradiotest.NewApp()
		app.Handle("work", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
			w.enter()
			defer w.leave()
			select {
			case <-time.After(15 * time.Millisecond):
			case <-ctx.Done():
			}
			return []any{"ok"}, nil
		}, nil, nil)
		s := gradiotest.NewUnstartedServer(app)
		s.DefaultConcurrencyLimit = -1
		s.Start()
		t.Cleanup(s.Close)
		sims = append(sims, s)
		urls = append(urls, s.URL)
	}
	env := []string{"GRADIOPOOL_LOG_FORMAT=json", "GRADIOPOOL_REPLICAS=" + strings.Join(urls, ","),
		"GRADIOPOOL_POOL_MIN_CONNECTIONS=1", fmt.Sprintf("GRADIOPOOL_POOL_MAX_CONNECTIONS=%d", limit),
		"GRADIOPOOL_HASH_KEY=cluster-key", "GRADIOPOOL_REDIS_URL=redis://" + srv.Addr + "/0",
		"GRADIOPOOL_CLUSTER_LEASE_TTL=" + ttl.String(), "GRADIOPOOL_CLUSTER_NAME=e2e"}
	var gws []*e2eGateway
	for range 3 {
		gws = append(gws, startServe(t, env, "--listen", "127.0.0.1:0"))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 300}}
	t.Cleanup(client.CloseIdleConnections)

	resetPeaks := func() {
		for _, w := range witnesses {
			w.reset()
		}
	}
	peakOf := func() []int {
		var out []int
		for _, w := range witnesses {
			out = append(out, int(w.peak.Load()))
		}
		return out
	}
	// The simulators' own Running counters, sampled, for the log.
	var overall atomic.Int64
	sampleDone := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Millisecond):
			}
			for _, s := range sims {
				if n := int64(s.Snapshot().Running); n > overall.Load() {
					overall.Store(n)
				}
			}
		}
	}()
	defer func() { close(stopSampling); <-sampleDone }()

	// 200 callers; each call goes to the next live gateway.
	var alive atomic.Int32
	alive.Store(3)
	var mu sync.Mutex
	userReplica := map[string]string{}
	var okCalls, failed, moved atomic.Int64
	var failMsg atomic.Value
	stop := make(chan struct{})
	var callers sync.WaitGroup
	for i := range 200 {
		user := fmt.Sprintf("user%03d@example.com", i)
		callers.Go(func() {
			for k := i; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				g := gws[k%int(alive.Load())]
				req, _ := http.NewRequest("POST", g.url+"/v1/predict/work", strings.NewReader(`{"data":["x"]}`))
				req.Header.Set("X-Gradiopool-User", user)
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					failMsg.Store(err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var out struct{ Replica string }
				if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
					failed.Add(1)
					failMsg.Store(fmt.Sprintf("%d %s", resp.StatusCode, b))
					continue
				}
				okCalls.Add(1)
				mu.Lock()
				if prev, ok := userReplica[user]; ok && prev != out.Replica {
					moved.Add(1)
				}
				userReplica[user] = out.Replica
				mu.Unlock()
			}
		})
	}
	defer func() { close(stop); callers.Wait() }()
	calls := func(n int64) {
		t.Helper()
		start := okCalls.Load()
		e2eWait(t, fmt.Sprintf("%d more calls", n), func() bool { return okCalls.Load() >= start+n })
	}
	checkPeaks := func(phase string) {
		t.Helper()
		for i, p := range peakOf() {
			if p > limit {
				t.Errorf("%s: replica %d ran %d calls at once, the limit is %d", phase, i, p, limit)
			}
		}
	}
	checkFailures := func(phase string) {
		t.Helper()
		if n := failed.Swap(0); n > 0 {
			t.Errorf("%s: %d calls failed, e.g. %v", phase, n, failMsg.Load())
		}
	}
	metric := func(g *e2eGateway, name string) string {
		resp, err := client.Get(g.url + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, name+" ") {
				return strings.TrimPrefix(line, name+" ")
			}
		}
		return ""
	}
	redisUp := func(want string, gs ...*e2eGateway) func() bool {
		return func() bool {
			for _, g := range gs {
				if metric(g, "gradiopool_redis_up") != want {
					return false
				}
			}
			return true
		}
	}

	// A user without session state may move for balance (users come
	// back, pool/spread.go), and each such move is logged with its
	// reason; any other move means the gateways did not share the user's
	// assignment.
	balanceMoves := func() int64 {
		n := 0
		for _, g := range gws {
			for _, line := range strings.Split(g.stderr.String(), "\n") {
				if strings.Contains(line, `"msg":"pool: assigned"`) && strings.Contains(line, `"reason":"balance"`) {
					n++
				}
			}
		}
		return int64(n)
	}

	// 1. Redis up.
	calls(1500)
	checkPeaks("redis up")
	checkFailures("redis up")
	moved1, balance1 := moved.Load(), balanceMoves()
	if balance1 > 0 {
		t.Logf("redis up: %d moves for balance logged, %d seen by the callers", balance1, moved1)
	}
	if moved1 > balance1 {
		t.Errorf("redis up: users moved between replicas %d times, %d of them for balance", moved1, balance1)
		// Why: each move is a "pool: assigned" line with the replica it
		// left (previous) or the assignment store's error; a gateway that
		// took Redis for lost (an operation slower than its time-out)
		// assigns from its own memory meanwhile.
		for i, g := range gws {
			for _, line := range strings.Split(g.stderr.String(), "\n") {
				if strings.Contains(line, `"msg":"pool: assigned"`) || strings.Contains(line, `"msg":"cluster: redis`) {
					t.Logf("gateway %d: %s", i, line)
				}
			}
		}
	}
	if got := peakOf(); got[0] < limit || got[1] < limit {
		t.Logf("note: the replicas peaked at %v calls, below the limit %d", got, limit)
	}
	var st struct {
		Scope         string
		GatewaysAlive int `json:"gatewaysAlive"`
		Pools         map[string]struct {
			MaxConnections int `json:"maxConnections"`
			Leases         int
			Gateways       map[string]struct{ Leases, Sessions int }
		}
	}
	resp, err := client.Get(gws[0].url + "/api/admin/pool-stats?scope=cluster")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(b, &st); err != nil || st.Scope != "cluster" || st.GatewaysAlive != 3 || len(st.Pools) != 2 {
		t.Fatalf("cluster stats: %v %s", err, b)
	}
	for name, p := range st.Pools {
		if p.MaxConnections != limit || len(p.Gateways) != 3 || p.Leases > limit {
			t.Errorf("cluster stats of %s: %+v", name, p)
		}
	}

	// 2. Redis stopped.
	srv.Stop()
	e2eWait(t, "redis_up 0 on every gateway", redisUp("0", gws...))
	// For a lease TTL after the loss a gateway may still use the leases
	// Redis counts for it (no stall at a loss; the limit holds: Redis
	// counts them for no one else); after that, its local share.
	time.Sleep(ttl + 50*time.Millisecond)
	resetPeaks()
	var sharePeak atomic.Int64
	sampleStats := make(chan struct{})
	statsDone := make(chan struct{})
	go func() {
		defer close(statsDone)
		for {
			select {
			case <-sampleStats:
				return
			case <-time.After(5 * time.Millisecond):
			}
			for _, g := range gws {
				resp, err := client.Get(g.url + "/api/admin/pool-stats")
				if err != nil {
					continue
				}
				var s struct {
					Pools map[string]struct {
						InUse int `json:"inUseConnections"`
					}
				}
				_ = json.NewDecoder(resp.Body).Decode(&s)
				resp.Body.Close()
				for _, p := range s.Pools {
					if int64(p.InUse) > sharePeak.Load() {
						sharePeak.Store(int64(p.InUse))
					}
				}
			}
		}
	}()
	calls(1000)
	close(sampleStats)
	<-statsDone
	if p := sharePeak.Load(); p > share {
		t.Errorf("redis down: a gateway had %d calls in flight on one replica, its share is %d", p, share)
	}
	checkPeaks("redis down")
	checkFailures("redis down")
	if n, b := moved.Load()-moved1, balanceMoves()-balance1; n > b {
		t.Errorf("redis down: users moved between replicas %d times, %d of them for balance", n, b)
	}
	for _, g := range gws {
		if n := strings.Count(g.stderr.String(), `"msg":"cluster: redis unreachable: each replica's limit falls back to a local share"`); n != 1 {
			t.Errorf("the outage was logged %d times by one gateway, want once", n)
		}
	}

	// 3. Redis started again, empty.
	resetPeaks()
	srv.Start()
	e2eWait(t, "redis_up 1 on every gateway", redisUp("1", gws...))
	calls(1000)
	checkPeaks("rejoin")
	checkFailures("rejoin")

	// 4. Kill a gateway that holds leases; its callers move to the others.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	dead := gws[2]
	var deadID string
	for _, line := range strings.Split(dead.stderr.String(), "\n") {
		var rec struct{ Msg, Gateway string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "cluster: joined" {
			deadID = rec.Gateway
		}
	}
	// deadLeases returns the expiry (Redis time, ms) of each lease of the
	// dead gateway still counted.
	deadLeases := func() []float64 {
		var exp []float64
		for _, r := range []string{sims[0].URL, sims[1].URL} {
			name := strings.TrimPrefix(r, "http://")
			zs, _ := rdb.ZRangeWithScores(context.Background(), "{e2e}:sem:"+name+":h", 0, -1).Result()
			for _, z := range zs {
				if strings.HasPrefix(z.Member.(string), deadID+":") {
					exp = append(exp, z.Score)
				}
			}
		}
		return exp
	}
	e2eWait(t, "the doomed gateway to hold leases", func() bool { return len(deadLeases()) > 0 })
	alive.Store(2)
	_ = dead.cmd.Process.Signal(syscall.SIGKILL)
	killedAt, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	held := deadLeases()
	// Nothing refreshes them any more: each expires at most one TTL after
	// the kill, by Redis' clock, and is then no longer counted.
	for _, exp := range held {
		if late := time.Duration(exp-float64(killedAt.UnixMilli())) * time.Millisecond; late > ttl {
			t.Errorf("a lease of the dead gateway lives until %v after the kill, lease TTL %v", late, ttl)
		}
	}
	e2eWait(t, "the dead gateway's leases to be reclaimed", func() bool { return len(deadLeases()) == 0 })
	freed := time.Since(killed)
	failed.Store(0) // the dead gateway's own requests in flight
	resetPeaks()
	calls(1000)
	checkPeaks("after the kill")
	checkFailures("after the kill")
	if got := peakOf(); got[0] <= 2*share && got[1] <= 2*share {
		t.Errorf("after the kill, two gateways ran at most %v calls per replica: their shares (%d each), not the whole limit %d", got, share, limit)
	}
	t.Logf("calls: %d ok; replica peaks after the kill %v (limit %d); the dead gateway's %d leases were reclaimed %v after SIGKILL (TTL %v); highest sample of the simulators' Running %d",
		okCalls.Load(), peakOf(), limit, len(held), freed.Round(time.Millisecond), ttl, overall.Load())
}

// witness counts the calls running in one simulated replica's handler.
type witness struct {
	mu        sync.Mutex
	now, peak atomic.Int64
}

func (w *witness) enter() {
	w.mu.Lock()
	n := w.now.Add(1)
	if n > w.peak.Load() {
		w.peak.Store(n)
	}
	w.mu.Unlock()
}

func (w *witness) leave() { w.now.Add(-1) }

func (w *witness) reset() {
	w.mu.Lock()
	w.peak.Store(w.now.Load())
	w.mu.Unlock()
}
