package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// runRouting measures anonymous routing on three replicas at Gradio's
// default concurrency of 1 whose Spaces have uneven queues from other
// users: expected-time routing (the Space's own queue) vs least-in-use
// (our own calls only), each on fresh replicas with the same load, the
// two modes alternating within this one run.
func runRouting(ctx context.Context, e *env, s *Section) error {
	work := e.pick(100*time.Millisecond, 40*time.Millisecond)
	dur := e.pick(20*time.Second, 4*time.Second)
	rounds := e.pickInt(2, 1)
	perSec := float64(time.Second) / float64(work) // one replica's capacity, calls/s
	external := []float64{0.9 * perSec, 0.5 * perSec, 0}
	ours := 0.8 * perSec
	s.Method = fmt.Sprintf("Three simulated replicas at Gradio's default concurrency of 1 (`upper`, %s of work per call: %.0f calls/s each at most). "+
		"Other users keep the Spaces' own queues uneven: an open-loop load of %.1f, %.1f and %.0f calls/s on the three, from clients outside the pool. "+
		"Our anonymous callers add %.1f calls/s (open loop, latency from the moment each call was due) for %s through `pool.Pool` with 50 sessions per replica. "+
		"**expected time** is the default routing (the Space's queue from its estimation messages, its run time and concurrency, and our waiters); "+
		"**least in use** is `Routing: RouteLeastInUse` (our own calls in use plus waiting). Each mode runs on fresh replicas; %d round(s) per mode, alternating.",
		work, perSec, external[0], external[1], external[2], ours, dur, rounds)
	type result struct {
		rec   *Recorder
		share [3]int
	}
	res := map[pool.Routing]*result{pool.RouteExpectedTime: {rec: NewRecorder()}, pool.RouteLeastInUse: {rec: NewRecorder()}}
	for round := range rounds {
		for _, mode := range []pool.Routing{pool.RouteExpectedTime, pool.RouteLeastInUse} {
			e.logf("  routing: round %d, %s", round+1, routingName(mode))
			if err := routingRound(ctx, mode, work, dur, external, ours, res[mode].rec, &res[mode].share); err != nil {
				return err
			}
		}
	}
	eta, lil := res[pool.RouteExpectedTime].rec.Summary(), res[pool.RouteLeastInUse].rec.Summary()
	if eta.N == 0 || lil.N == 0 {
		return fmt.Errorf("no successful calls (expected time: %s; least in use: %s)", errorsCell(eta), errorsCell(lil))
	}
	row := func(name string, m Summary, share [3]int) []string {
		return []string{name, fmt.Sprint(m.N), ms(m.P50), ms(m.P95), ms(m.P99), ms(m.Max), fmt.Sprintf("%d / %d / %d", share[0], share[1], share[2]), errorsCell(m)}
	}
	s.Tables = append(s.Tables, Table{
		Header: []string{"routing", "calls", "p50", "p95", "p99", "max", "calls on replica 1 / 2 / 3", "errors"},
		Rows: [][]string{
			row("expected time", eta, res[pool.RouteExpectedTime].share),
			row("least in use", lil, res[pool.RouteLeastInUse].share),
			{"ratio expected / least", "", fmt.Sprintf("%.2f", float64(eta.P50)/float64(lil.P50)), fmt.Sprintf("%.2f", float64(eta.P95)/float64(lil.P95)), fmt.Sprintf("%.2f", float64(eta.P99)/float64(lil.P99)), "", "", ""},
		},
	})
	s.note("replica 1 is the busiest Space (%.0f %% busy from other users), replica 3 is idle; a call's completion time includes its wait for a session, its wait in the Space's queue and its %s run.", 90.0, work)
	s.highlight("Routing by the Space's own queue vs by our in-use count (3 replicas at concurrency 1, uneven queues): p50 %s vs %s, p95 %s vs %s.",
		ms(eta.P50), ms(lil.P50), ms(eta.P95), ms(lil.P95))
	return nil
}

func routingName(r pool.Routing) string {
	if r == pool.RouteLeastInUse {
		return "least in use"
	}
	return "expected time"
}

// routingRound runs one mode on fresh replicas.
func routingRound(ctx context.Context, mode pool.Routing, work, dur time.Duration, external []float64, ours float64, rec *Recorder, share *[3]int) error {
	var srvs []*gradiotest.Server
	var urls []string
	for range 3 {
		srv := gradiotest.NewUnstartedServer(nil)
		srv.Latency = work
		srv.DefaultConcurrencyLimit = 1 // Gradio's default
		srv.Start()
		defer srv.Close()
		srvs = append(srvs, srv)
		urls = append(urls, srv.URL)
	}
	p, err := pool.New(pool.Config{Replicas: urls, Routing: mode, QueueTimeout: time.Minute})
	if err != nil {
		return err
	}
	defer p.Close(context.WithoutCancel(ctx))
	// Warm: the apps connected and each Space's run time known, as in a
	// pool that has been serving for a while.
	for i := range 3 {
		if _, err := p.Predict(ctx, fmt.Sprintf("warm%d@example.com", i), "upper", "warm"); err != nil {
			return fmt.Errorf("warm-up call: %w", err)
		}
	}
	var wg sync.WaitGroup
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, rate := range external {
		if rate == 0 {
			continue
		}
		c, err := gradio.Connect(ctx, srvs[i].URL)
		if err != nil {
			return err
		}
		defer c.Close()
		wg.Go(func() {
			// Longer than ours, so the Spaces stay loaded to the end.
			OpenLoop(lctx, rate, dur+5*time.Second, func(ctx context.Context) error {
				_, err := c.Predict(ctx, "upper", "other user")
				return err
			}, classify)
		})
	}
	time.Sleep(2 * time.Second) // the other users' queues build up
	var mu sync.Mutex
	idx := map[string]int{}
	for i, n := range p.Replicas() {
		idx[n] = i
	}
	r := OpenLoop(ctx, ours, dur, func(ctx context.Context) error {
		res, err := p.Predict(ctx, "", "upper", "ours")
		if err == nil {
			mu.Lock()
			share[idx[res.Replica]]++
			mu.Unlock()
		}
		return err
	}, classify)
	for _, d := range r.samples {
		rec.Add(d)
	}
	for class, n := range r.Latency.Errors {
		for range n {
			rec.Fail(class)
		}
	}
	cancel()
	wg.Wait()
	return nil
}

// runWarmup measures a burst from 0 to 40 sessions in use on the session
// pool with costly connects, with demand tracking (DemandWindow) and
// without, alternating within this one run.
func runWarmup(ctx context.Context, e *env, s *Section) error {
	connect := e.pick(500*time.Millisecond, 100*time.Millisecond)
	hold := e.pick(2*time.Second, 400*time.Millisecond)
	ramp := e.pick(2*time.Second, 400*time.Millisecond)
	window := e.pick(10*time.Second, 2*time.Second)
	const callers = 40
	rounds := e.pickInt(3, 1)
	s.Method = fmt.Sprintf("`pool/sessionpool` with sessions whose connect costs %s (a stand-in for a costly session: a Gradio session of a connected app costs no network, "+
		"so in `pool.Pool` this matters while a replica's app is still connecting), MinSessions 5, MaxSessions 50. "+
		"A burst ramps from 0 to %d callers in flight over %s (one new caller every %s); each holds its session for %s. "+
		"*First-call latency* is each caller's wait for a session plus its hold. **demand warm-up** is `DemandWindow: %s`; **without** opens a session only for a caller who needs one now. "+
		"%d round(s) per mode, alternating, each on a fresh pool.",
		connect, callers, ramp, ramp/callers, hold, window, rounds)
	recs := map[bool]*Recorder{false: NewRecorder(), true: NewRecorder()}
	ahead := map[bool]int64{}
	for round := range rounds {
		for _, demand := range []bool{false, true} {
			e.logf("  warmup: round %d, demand tracking %v", round+1, demand)
			n, err := warmupRound(ctx, demand, connect, hold, ramp, window, callers, recs[demand])
			if err != nil {
				return err
			}
			ahead[demand] += n
		}
	}
	with, without := recs[true].Summary(), recs[false].Summary()
	if with.N == 0 || without.N == 0 {
		return fmt.Errorf("no successful callers (with: %s; without: %s)", errorsCell(with), errorsCell(without))
	}
	s.Tables = append(s.Tables, Table{
		Header: []string{"mode", "callers", "p50", "p95", "p99", "max", "sessions opened ahead", "errors"},
		Rows: [][]string{
			{"without", fmt.Sprint(without.N), ms(without.P50), ms(without.P95), ms(without.P99), ms(without.Max), fmt.Sprint(ahead[false]), errorsCell(without)},
			{"demand warm-up", fmt.Sprint(with.N), ms(with.P50), ms(with.P95), ms(with.P99), ms(with.Max), fmt.Sprint(ahead[true]), errorsCell(with)},
			{"ratio with / without", "", fmt.Sprintf("%.2f", float64(with.P50)/float64(without.P50)), fmt.Sprintf("%.2f", float64(with.P95)/float64(without.P95)), fmt.Sprintf("%.2f", float64(with.P99)/float64(without.P99)), "", "", ""},
		},
	})
	s.note("the hold (%s) is in every figure: the least a caller can take is the hold, the most a connect more.", hold)
	s.highlight("Burst 0 → %d in flight, %s connects: p95 first-call latency %s with demand warm-up vs %s without.", callers, connect, ms(with.P95), ms(without.P95))
	return nil
}

func warmupRound(ctx context.Context, demand bool, connect, hold, ramp, window time.Duration, callers int, rec *Recorder) (int64, error) {
	cfg := sessionpool.Config[struct{}]{
		Connect: func(ctx context.Context) (struct{}, error) {
			t := time.NewTimer(connect)
			defer t.Stop()
			select {
			case <-t.C:
				return struct{}{}, nil
			case <-ctx.Done():
				return struct{}{}, ctx.Err()
			}
		},
		MinSessions:         5,
		MaxSessions:         50,
		HealthCheckInterval: -1,
	}
	if demand {
		cfg.DemandWindow = window
	}
	p, err := sessionpool.New(cfg)
	if err != nil {
		return 0, err
	}
	defer p.Close(context.WithoutCancel(ctx))
	p.Warm()
	time.Sleep(2 * connect) // the minimum is open
	step := ramp / time.Duration(callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			t0 := time.Now()
			sess, err := p.Acquire(ctx)
			if err != nil {
				rec.Fail(classify(err))
				return
			}
			t := time.NewTimer(hold)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			sess.Release()
			rec.Add(time.Since(t0))
		})
		time.Sleep(step)
	}
	wg.Wait()
	return p.Stat().DemandConnects, nil
}
