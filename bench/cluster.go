package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/pool"
	"github.com/gradiopool/gradiopool/pool/assign"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// startRedis runs a redis-server on a free loopback port, without
// persistence; stop kills it.
func startRedis(ctx context.Context) (addr string, stop func(), err error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server is not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	cmd := exec.CommandContext(ctx, path, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && strings.Contains(sc.Text(), "Ready to accept connections") {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
	}()
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	select {
	case ok := <-ready:
		if ok {
			return addr, stop, nil
		}
	case <-time.After(10 * time.Second):
	}
	stop()
	return "", nil, errors.New("redis-server did not start")
}

// clusterGateway is one gateway's pool and cluster membership (the HTTP
// layer is left out: it is the same with or without Redis).
type clusterGateway struct {
	p     *pool.Pool
	coord *cluster.Coordinator
	store *cluster.Store
	rc    *redis.Client
}

func newClusterGateway(ctx context.Context, addr string, urls []string, limit, warm int, name string) (*clusterGateway, error) {
	g := &clusterGateway{rc: redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 64})}
	var err error
	g.coord, err = cluster.New(ctx, cluster.Config{Client: g.rc, Name: name, Limit: limit, MaxWaiters: -1})
	if err != nil {
		g.rc.Close()
		return nil, err
	}
	shared, _ := assign.NewRedis(assign.RedisConfig{Client: g.rc, Prefix: "{" + name + "}:assign:"})
	g.store = g.coord.Store(shared)
	g.p, err = pool.New(pool.Config{Replicas: urls, MinConnections: warm, MaxConnections: limit, MaxWaiters: -1,
		Limiter: g.coord, Store: g.store, HashKey: []byte("bench")})
	if err != nil {
		g.close()
		return nil, err
	}
	g.coord.AddReplicas(g.p.Replicas()...)
	return g, nil
}

func (g *clusterGateway) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if g.p != nil {
		_ = g.p.Close(ctx)
	}
	_ = g.coord.Close(ctx)
	_ = g.store.Close()
	g.rc.Close()
}

// totalOps sums the Redis round trips of cs, in total and by operation,
// and the leases handed on locally without one ("handoff", not in n).
func totalOps(cs ...*cluster.Coordinator) (n uint64, by map[string]uint64) {
	by = map[string]uint64{}
	for _, c := range cs {
		for k, v := range c.Ops() {
			by[k] += v
			n += v
		}
		by["handoff"] += c.HandOffs()
	}
	return n, by
}

// runCluster measures what sharing the limits through Redis costs: the
// added latency of a lease and a shared assignment per call, the Redis
// round trips per call, and the throughput of three gateways against one
// under one global limit.
func runCluster(ctx context.Context, e *env, s *Section) error {
	addr, stop, err := startRedis(ctx)
	if err != nil {
		s.notMeasured("%v: the cluster section needs a local redis-server", err)
		return nil
	}
	defer stop()
	rates := []float64{100, 500}
	dur := e.pick(6*time.Second, 400*time.Millisecond)
	slicesPerRate := e.pickInt(3, 2)
	const users = 1000
	s.Method = fmt.Sprintf("A local redis-server (no persistence, loopback) and one simulated replica (instant `upper`, unlimited concurrency). "+
		"Latency: `pool.Pool.Predict` paced open-loop at 100 and 500 calls/s for %s per rate and mode, %d registered users in turn, in two modes that take turns slice by slice: "+
		"**local** = one pool, assignments in memory, no limiter; **redis** = the same pool as a cluster member (package pool/cluster): a lease from the Redis semaphore per call and the assignments in Redis. "+
		"The limit (1000) is far above the load, so the figures are the cost of the coordination, not of waiting. "+
		"Redis operations per call are the cluster member's round trips (scripts, commands, pipelines, each one round trip) during the redis runs, divided by the calls. "+
		"Throughput: the replica answers after 20 ms, the limit is 50 calls in flight across every gateway (2500 calls/s at best); 200 closed-loop callers for %s on one gateway, then spread over three; "+
		"all in this process (the HTTP layer is left out: it is the same with or without Redis).", dur, users, e.pick(5*time.Second, 500*time.Millisecond))

	sm, err := e.startSims(ctx, simSpec{Replicas: 1})
	if err != nil {
		return err
	}
	defer sm.Close()
	const warm = 32
	local, err := pool.New(pool.Config{Replicas: sm.URLs, MinConnections: warm, MaxConnections: 1000, MaxWaiters: -1, HashKey: []byte("bench")})
	if err != nil {
		return err
	}
	defer local.Close(context.WithoutCancel(ctx))
	member, err := newClusterGateway(ctx, addr, sm.URLs, 1000, warm, "bench-latency")
	if err != nil {
		return err
	}
	defer member.close()
	var n atomic.Uint64
	user := func() string { return fmt.Sprintf("user%d@example.com", n.Add(1)%users) }
	modes := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"local", func(ctx context.Context) error { _, err := local.Predict(ctx, user(), "upper", "hi"); return err }},
		{"redis", func(ctx context.Context) error { _, err := member.p.Predict(ctx, user(), "upper", "hi"); return err }},
	}
	for _, m := range modes {
		ClosedLoopN(ctx, 8, 2*users, func(ctx context.Context, _ int) error { return m.call(ctx) }, nil)
	}
	results := map[string]map[float64]OpenLoopResult{}
	var opsCalls int
	var opsTotal uint64
	opsBy := map[string]uint64{}
	for _, rate := range rates {
		parts := map[string][]OpenLoopResult{}
		e.logf("  cluster: %.0f calls/s, %s per mode", rate, dur)
		for round := range slicesPerRate {
			for k := range modes {
				m := modes[(k+round)%len(modes)]
				before, beforeBy := totalOps(member.coord)
				r := OpenLoop(ctx, rate, dur/time.Duration(slicesPerRate), m.call, nil)
				parts[m.name] = append(parts[m.name], r)
				if m.name == "redis" {
					after, afterBy := totalOps(member.coord)
					opsTotal += after - before
					opsCalls += r.Latency.N
					for k, v := range afterBy {
						opsBy[k] += v - beforeBy[k]
					}
				}
			}
		}
		for _, m := range modes {
			if results[m.name] == nil {
				results[m.name] = map[float64]OpenLoopResult{}
			}
			results[m.name][rate] = mergeOpenLoop(parts[m.name])
		}
	}
	t := Table{Header: []string{"rate", "mode", "calls ok", "p50", "p99", "max", "added p50", "added p99", "errors"}}
	for _, rate := range rates {
		l0 := results["local"][rate].Latency
		for _, m := range modes {
			l := results[m.name][rate].Latency
			a50, a99 := "–", "–"
			if m.name == "redis" {
				a50, a99 = signedMs(l.P50-l0.P50), signedMs(l.P99-l0.P99)
			}
			t.Rows = append(t.Rows, []string{fmt.Sprintf("%.0f/s", rate), m.name, fmt.Sprint(l.N), ms(l.P50), ms(l.P99), ms(l.Max), a50, a99, errorsCell(l)})
		}
	}
	s.Tables = append(s.Tables, t)
	perCall := 0.0
	if opsCalls > 0 {
		perCall = float64(opsTotal) / float64(opsCalls)
	}
	ot := Table{Caption: "Redis round trips of the cluster member during the redis runs, per successful call.", Header: []string{"operation", "per call"}}
	keys := make([]string, 0, len(opsBy))
	for k, v := range opsBy {
		if v > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "handoff" {
			ot.Rows = append(ot.Rows, []string{k, fmt.Sprintf("%.2f", float64(opsBy[k])/float64(max(opsCalls, 1)))})
		}
	}
	ot.Rows = append(ot.Rows, []string{"total", fmt.Sprintf("%.2f", perCall)})
	ot.Rows = append(ot.Rows, []string{"(leases handed on locally, no round trip)", fmt.Sprintf("%.2f", float64(opsBy["handoff"])/float64(max(opsCalls, 1)))})
	s.Tables = append(s.Tables, ot)

	// Added latency with Redis a round trip away: a delaying proxy in
	// front of the redis-server, one cluster member through it, 100
	// calls/s open loop, beside the local pool's figures above.
	l100 := results["local"][100].Latency
	rt := Table{Caption: "Redis a round trip away (a delaying loopback proxy), 100 calls/s open loop: added latency per call over the local pool at 100 calls/s above, and round trips per call (the issue measured 2.8 in series, 4 in all, before the acquire carried the releases and the assignment read refreshed it).",
		Header: []string{"Redis RTT", "calls ok", "p50", "p99", "added p50", "added p99", "round trips per call", "errors"}}
	for _, rtt := range []time.Duration{100 * time.Microsecond, time.Millisecond, 5 * time.Millisecond} {
		px, err := startDelayProxy(addr, rtt)
		if err != nil {
			return err
		}
		g, err := newClusterGateway(ctx, px.Addr(), sm.URLs, 1000, warm, fmt.Sprintf("bench-rtt-%d", rtt.Microseconds()))
		if err != nil {
			px.Close()
			return err
		}
		call := func(ctx context.Context) error { _, err := g.p.Predict(ctx, user(), "upper", "hi"); return err }
		ClosedLoopN(ctx, 8, 2*users, func(ctx context.Context, _ int) error { return call(ctx) }, nil)
		before, _ := totalOps(g.coord)
		r := OpenLoop(ctx, 100, dur, call, nil)
		after, _ := totalOps(g.coord)
		g.close()
		px.Close()
		l := r.Latency
		rt.Rows = append(rt.Rows, []string{rtt.String(), fmt.Sprint(l.N), ms(l.P50), ms(l.P99), signedMs(l.P50 - l100.P50), signedMs(l.P99 - l100.P99),
			fmt.Sprintf("%.2f", float64(after-before)/float64(max(l.N, 1))), errorsCell(l)})
	}
	s.Tables = append(s.Tables, rt)

	// Throughput: one gateway against three under one global limit.
	sl, err := e.startSims(ctx, simSpec{Replicas: 1, Latency: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	defer sl.Close()
	tdur := e.pick(5*time.Second, 500*time.Millisecond)
	const limit, workers = 50, 200
	tp := Table{Caption: fmt.Sprintf("%d closed-loop callers, replica latency 20 ms, global limit %d (at best %d calls/s).", workers, limit, limit*50),
		Header: []string{"gateways", "calls/s", "p50", "p99", "errors", "Redis ops per call", "local hand-offs per call"}}
	{
		// The baseline: one gateway without Redis (the session pool's own
		// limit of 50).
		p, err := pool.New(pool.Config{Replicas: sl.URLs, MinConnections: 1, MaxConnections: limit, MaxWaiters: -1, HashKey: []byte("bench")})
		if err != nil {
			return err
		}
		var next atomic.Uint64
		call := func(ctx context.Context) error {
			k := next.Add(1)
			_, err := p.Predict(ctx, fmt.Sprintf("user%d@example.com", k%users), "upper", "hi")
			return err
		}
		ClosedLoop(ctx, workers, tdur/5, call, nil)
		r := ClosedLoop(ctx, workers, tdur, call, nil)
		_ = p.Close(context.WithoutCancel(ctx))
		tp.Rows = append(tp.Rows, []string{"1, no Redis", fmt.Sprintf("%.0f", r.Throughput), ms(r.Latency.P50), ms(r.Latency.P99), errorsCell(r.Latency), "0", "–"})
	}
	var tput [2]float64
	for i, ngw := range []int{1, 3} {
		var gws []*clusterGateway
		for range ngw {
			g, err := newClusterGateway(ctx, addr, sl.URLs, limit, 1, fmt.Sprintf("bench-tput-%d", ngw))
			if err != nil {
				return err
			}
			gws = append(gws, g)
		}
		var coords []*cluster.Coordinator
		for _, g := range gws {
			coords = append(coords, g.coord)
		}
		var next atomic.Uint64
		call := func(ctx context.Context) error {
			k := next.Add(1)
			_, err := gws[k%uint64(ngw)].p.Predict(ctx, fmt.Sprintf("user%d@example.com", k%users), "upper", "hi")
			return err
		}
		ClosedLoop(ctx, workers, tdur/5, call, nil) // warm-up: sessions grow to the limit
		before, hb := totalOps(coords...)
		r := ClosedLoop(ctx, workers, tdur, call, nil)
		after, ha := totalOps(coords...)
		for _, g := range gws {
			g.close()
		}
		tput[i] = r.Throughput
		tp.Rows = append(tp.Rows, []string{fmt.Sprint(ngw), fmt.Sprintf("%.0f", r.Throughput), ms(r.Latency.P50), ms(r.Latency.P99), errorsCell(r.Latency),
			fmt.Sprintf("%.2f", float64(after-before)/float64(max(r.Latency.N, 1))),
			fmt.Sprintf("%.2f", float64(ha["handoff"]-hb["handoff"])/float64(max(r.Latency.N, 1)))})
	}
	s.Tables = append(s.Tables, tp)
	l5, r5 := results["local"][500].Latency, results["redis"][500].Latency
	s.highlight("Redis leases and assignments at 500 calls/s: %s p50, %s p99 added per call; %.1f Redis round trips per call; three gateways %.0f calls/s vs one %.0f under a global limit of %d.",
		signedMs(r5.P50-l5.P50), signedMs(r5.P99-l5.P99), perCall, tput[1], tput[0], limit)
	s.note("\"added\" is the difference of percentiles (redis − local), not a percentile of differences; a negative value is noise. One run on a shared machine: quote ratios.")
	return nil
}
