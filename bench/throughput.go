package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

func runThroughput(ctx context.Context, e *env, s *Section) error {
	if err := throughputMax(ctx, e, s); err != nil {
		s.note("maximum throughput: not measured: %v", err)
	}
	return throughputSaturation(ctx, e, s)
}

// throughputMax measures the most calls/s through the gateway to three
// replicas with instant handlers: closed loop, enough workers to keep every
// part busy.
func throughputMax(ctx context.Context, e *env, s *Section) error {
	dur := e.pick(5*time.Second, 500*time.Millisecond)
	_, p, gw, stop, err := e.gatewayOverSims(ctx, simSpec{Replicas: 3})
	if err != nil {
		return err
	}
	defer stop()
	body := []byte(`{"data":["hello"]}`)
	t := Table{
		Caption: fmt.Sprintf("Maximum throughput: instant handler, three replicas, closed loop for %s per row (each worker sends its next call when the previous returns); the replicas (their own process), the gateway and the load generator share the machine's CPUs.", dur),
		Header:  []string{"path", "workers", "calls/s", "p50", "p99", "errors"},
	}
	for _, workers := range []int{16, 32, 64} {
		ClosedLoopN(ctx, workers, 4*workers, func(ctx context.Context, _ int) error { return gw.predict(ctx, "", "upper", body) }, nil)
		e.logf("  throughput: max, %d workers", workers)
		r := ClosedLoop(ctx, workers, dur, func(ctx context.Context) error {
			_, err := p.Predict(ctx, "", "upper", "hello")
			return err
		}, classify)
		t.Rows = append(t.Rows, []string{"pool library", fmt.Sprint(workers), fmt.Sprintf("%.0f", r.Throughput), ms(r.Latency.P50), ms(r.Latency.P99), errorsCell(r.Latency)})
		r = ClosedLoop(ctx, workers, dur, func(ctx context.Context) error { return gw.predict(ctx, "", "upper", body) }, classifyHTTP)
		e.maxGateway = max(e.maxGateway, r.Throughput)
		t.Rows = append(t.Rows, []string{"gateway (HTTP)", fmt.Sprint(workers), fmt.Sprintf("%.0f", r.Throughput), ms(r.Latency.P50), ms(r.Latency.P99), errorsCell(r.Latency)})
	}
	s.Tables = append(s.Tables, t)
	return nil
}

// throughputSaturation offers rising open-loop load to a gateway whose
// capacity is set by the pool (sessions x work time), and shows what happens
// below, at and past it.
func throughputSaturation(ctx context.Context, e *env, s *Section) error {
	work := e.pick(100*time.Millisecond, 50*time.Millisecond)
	maxConns := e.pickInt(10, 5)
	queueTimeout := e.pick(time.Second, 500*time.Millisecond)
	maxWaiters := 50
	dur := e.pick(5*time.Second, 500*time.Millisecond)
	capacity := float64(3*maxConns) / work.Seconds()
	s.Method = fmt.Sprintf("Capacity-bound run: three replicas, each call takes %s of work, the pool allows %d sessions per replica, so the system's capacity is "+
		"3 × %d / %s = **%.0f calls/s**. Waiters time out after %s (`QueueTimeout`), and at most %d wait per replica (`MaxWaiters`). "+
		"Load is offered open-loop through the gateway at fractions of capacity for %s per step; anonymous callers (least-loaded replica). "+
		"Below capacity nothing should fail; past it, callers should wait and then get 503/429 with `Retry-After` instead of piling up.",
		work, maxConns, maxConns, work, capacity, queueTimeout, maxWaiters, dur)
	sm, err := e.startSims(ctx, simSpec{Replicas: 3, Latency: work})
	if err != nil {
		return err
	}
	defer sm.Close()
	p, err := pool.New(pool.Config{Replicas: sm.URLs, MinConnections: maxConns, MaxConnections: maxConns, QueueTimeout: queueTimeout, MaxWaiters: maxWaiters})
	if err != nil {
		return err
	}
	defer p.Close(context.WithoutCancel(ctx))
	gw, err := startGateway(p, maxConns)
	if err != nil {
		return err
	}
	defer gw.Close()
	body := []byte(`{"data":["hello"]}`)
	// Warm every session.
	ClosedLoopN(ctx, 3*maxConns, 6*maxConns, func(ctx context.Context, _ int) error { return gw.predict(ctx, "", "upper", body) }, nil)

	fractions := []float64{0.5, 0.8, 1.0, 1.2, 1.5, 2.0}
	t := Table{
		Caption: "ok calls/s is the successful calls divided by the time from the first send to the last answer; latencies count from each call's scheduled start.",
		Header:  []string{"offered", "of capacity", "ok calls/s", "p50 (ok)", "p99 (ok)", "failed", "failures", "failed after p50 / max"},
	}
	var xs []float64
	okRate, failRate := series{Name: "ok calls/s"}, series{Name: "failed calls/s"}
	offered := series{Name: "offered calls/s"}
	belowOK := true
	var pastClasses []string
	var failedQuick, failedLate int // rejected at once vs after waiting
	for _, f := range fractions {
		rate := math.Round(f * capacity)
		e.logf("  throughput: saturation, %.0f calls/s (%.0f%% of capacity)", rate, 100*f)
		r := OpenLoop(ctx, rate, dur, func(ctx context.Context) error { return gw.predict(ctx, "", "upper", body) }, classifyHTTP)
		l := r.Latency
		failedIn := "–"
		if r.FailedIn.N > 0 {
			failedIn = ms(r.FailedIn.P50) + " / " + ms(r.FailedIn.Max)
		}
		t.Rows = append(t.Rows, []string{fmt.Sprintf("%.0f/s", rate), fmt.Sprintf("%.0f%%", 100*f), fmt.Sprintf("%.0f", r.Achieved), ms(l.P50), ms(l.P99), fmt.Sprint(l.Failed), errorsCell(l), failedIn})
		xs = append(xs, rate)
		okRate.Values = append(okRate.Values, r.Achieved)
		failRate.Values = append(failRate.Values, float64(l.Failed)/r.Elapsed.Seconds())
		offered.Values = append(offered.Values, rate)
		if f < 1 && l.Failed > 0 {
			belowOK = false
		}
		if f > 1 {
			pastClasses = append(pastClasses, sortedKeys(l.Errors)...)
			if r.FailedIn.N > 0 {
				if r.FailedIn.P50 < queueTimeout/2 {
					failedQuick++
				} else {
					failedLate++
				}
			}
		}
		// Let the queues drain between steps.
		waitIdle(ctx, p, 2*queueTimeout)
	}
	s.Tables = append(s.Tables, t)
	var served []string
	for i, f := range fractions {
		if f > 1 {
			served = append(served, fmt.Sprintf("%.0f", okRate.Values[i]))
		}
	}
	rest := "and nothing failed"
	if len(pastClasses) > 0 {
		rest = "and the rest were answered " + strings.Join(dedupe(pastClasses), ", ")
	}
	s.highlight("Throughput: at most %.0f calls/s through the gateway to three replicas (instant handler, closed loop). Capacity-bound at %.0f calls/s: %s below capacity; past it %s calls/s were served %s.",
		e.maxGateway, capacity, map[bool]string{true: "no failures", false: "some failures"}[belowOK], strings.Join(served, ", "), rest)
	if peak := slices.Max(okRate.Values); peak < capacity {
		s.note("the most served in any step was %.0f calls/s, %.0f%% of the nominal %.0f: each call holds its session for its %s of work plus the round trips around it.", peak, 100*peak/capacity, capacity, work)
	}
	if belowOK {
		s.note("below capacity (50%% and 80%%) no call failed.")
	} else {
		s.note("**some calls failed below capacity** (see the table): the open-loop arrivals are bursty at the scale of the %s work time, and the machine's CPUs are shared with the replicas", work)
	}
	if len(pastClasses) > 0 {
		s.note("past capacity, the failures were: %s.", strings.Join(dedupe(pastClasses), ", "))
	}
	switch {
	case failedQuick > 0 && failedLate == 0:
		s.note("past capacity most rejected callers were turned away at once (median well under the %s `QueueTimeout`): the bounded waiter lists (`MaxWaiters`) filled first, so the callers that were admitted waited at most about one queue's worth, and the rest got an immediate answer to retry.", queueTimeout)
	case failedLate > 0 && failedQuick == 0:
		s.note("past capacity the rejected callers mostly waited out the %s `QueueTimeout` before their answer.", queueTimeout)
	case failedLate > 0:
		s.note("past capacity some steps rejected callers at once (waiter lists full) and others after the %s `QueueTimeout`.", queueTimeout)
	}
	e.addChart(s, "saturation.png", "offered vs ok vs failed calls per second", func(dir, file string) error {
		return lineChart(dir, file, "Offered load vs served (gateway, 3 replicas)", "offered calls/s", "calls/s", xs,
			[]series{offered, okRate, failRate})
	})
	return nil
}

// waitIdle waits until the pool has no call in flight and nobody waiting,
// or until d passes.
func waitIdle(ctx context.Context, p *pool.Pool, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st := statsNumbers(p)
		if st["inUseConnections"] == 0 && st["totalQueued"] == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
