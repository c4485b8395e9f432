package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// classify names an error of the client or the pool for the report.
func classify(err error) string {
	var (
		ce *gradio.ConnectError
		me *gradio.MetadataError
		ae *gradio.AppError
		cl *gradio.ConnectionLostError
		af *pool.AllReplicasFailedError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, pool.ErrQueueTimeout):
		return "queue timeout"
	case errors.Is(err, pool.ErrQueueFull):
		return "queue full"
	case errors.Is(err, gradio.ErrQueueFull):
		return "app queue full"
	case errors.As(err, &af):
		return "all replicas failed"
	case errors.As(err, &ce):
		return "connect error"
	case errors.As(err, &me):
		return "metadata error"
	case errors.As(err, &ae):
		return "app error"
	case errors.As(err, &cl):
		return "connection lost"
	}
	msg := err.Error()
	if len(msg) > 60 {
		msg = msg[:60] + "…"
	}
	return msg
}

func runHeadline(ctx context.Context, e *env, s *Section) error {
	connect := e.pick(2*time.Second, 200*time.Millisecond)
	work := e.pick(200*time.Millisecond, 20*time.Millisecond)
	const workers = 25
	perCallN := e.pickInt(75, 75)
	pooledN := e.pickInt(500, 250)
	s.Method = fmt.Sprintf("Three simulated replicas whose connect costs %s (the `ConnectCost` knob delays each metadata request: `/config`, and `/info` when the client fetches it) "+
		"and whose calls take %s of work (`Latency` knob; the app's concurrency is unlimited so the replicas are not the bottleneck). "+
		"%d workers call `upper` back to back. **Connect per call** is what the seed's old system did: a new `gradio.Connect` for every request, then `Predict`, then `Close`. "+
		"**Pooled** is `pool.Pool` with the seed's defaults (5 to 50 sessions per replica, round-robin sticky users, one user per worker). "+
		"*First call* is the first request on a cold pool (lazy initialisation included); *warm* calls are measured after one untimed round at the same concurrency, "+
		"so the pool has grown to the workers' %d sessions.", connect, work, workers, workers)
	if e.opts.Quick {
		s.Method += fmt.Sprintf(" Quick mode: times scaled down (%s connect and %s work instead of 2 s and 200 ms).", connect, work)
	}
	sm, err := e.startSims(ctx, simSpec{Replicas: 3, ConnectCost: connect, Latency: work})
	if err != nil {
		return err
	}
	defer sm.Close()

	// Connect per call.
	e.logf("  headline: connect per call, %d calls", perCallN)
	connRec := NewRecorder()
	var perCallFirst time.Duration
	perCall := ClosedLoopN(ctx, workers, perCallN, func(ctx context.Context, i int) error {
		t0 := time.Now()
		c, err := gradio.Connect(ctx, sm.URLs[i%len(sm.URLs)])
		if err != nil {
			return err
		}
		defer c.Close()
		connRec.Add(time.Since(t0))
		_, err = c.Predict(ctx, "upper", "hello")
		if i == 0 {
			perCallFirst = time.Since(t0) // read after ClosedLoopN returns
		}
		return err
	}, classify)
	connSum := connRec.Summary()

	// Pooled.
	e.logf("  headline: pooled, %d calls", pooledN)
	p, err := pool.New(pool.Config{Replicas: sm.URLs})
	if err != nil {
		return err
	}
	defer p.Close(context.WithoutCancel(ctx))
	user := func(i int) string { return fmt.Sprintf("user%d@example.com", i%workers) }
	t0 := time.Now()
	if _, err := p.Predict(ctx, user(0), "upper", "hello"); err != nil {
		return fmt.Errorf("pooled first call: %w", err)
	}
	first := time.Since(t0)
	warmup := ClosedLoopN(ctx, workers, workers, func(ctx context.Context, i int) error {
		_, err := p.Predict(ctx, user(i), "upper", "hello")
		return err
	}, classify)
	pooled := ClosedLoopN(ctx, workers, pooledN, func(ctx context.Context, i int) error {
		_, err := p.Predict(ctx, user(i), "upper", "hello")
		return err
	}, classify)

	pc, po := perCall.Latency, pooled.Latency
	if pc.N == 0 || po.N == 0 {
		return fmt.Errorf("no successful calls (connect per call: %s; pooled: %s)", errorsCell(pc), errorsCell(po))
	}
	s.Tables = append(s.Tables, Table{
		Header: []string{"mode", "calls", "first call", "p50", "p95", "p99", "max", "calls/s", "errors"},
		Rows: [][]string{
			{"connect per call", fmt.Sprint(pc.N), ms(perCallFirst), ms(pc.P50), ms(pc.P95), ms(pc.P99), ms(pc.Max), fmt.Sprintf("%.1f", perCall.Throughput), errorsCell(pc)},
			{"pooled (warm)", fmt.Sprint(po.N), ms(first), ms(po.P50), ms(po.P95), ms(po.P99), ms(po.Max), fmt.Sprintf("%.1f", pooled.Throughput), errorsCell(po)},
			{"ratio pooled / per call", "", fmt.Sprintf("%.2f", float64(first)/float64(perCallFirst)), fmt.Sprintf("%.3f", float64(po.P50)/float64(pc.P50)), fmt.Sprintf("%.3f", float64(po.P95)/float64(pc.P95)), fmt.Sprintf("%.3f", float64(po.P99)/float64(pc.P99)), "", fmt.Sprintf("%.1f×", pooled.Throughput/perCall.Throughput), ""},
		},
	})
	s.note("connect per call: the `gradio.Connect` part alone took p50 %s (p99 %s); the rest is the call.", ms(connSum.P50), ms(connSum.P99))
	s.note("pooled: the untimed warm-up round (pool growing from 5 to %d sessions per replica as needed) had p50 %s, max %s.", workers, ms(warmup.Latency.P50), ms(warmup.Latency.Max))
	s.note("the first pooled call includes lazy initialisation (the replica's minimum sessions connect in parallel and the call takes the first one ready): it took %s, against %s for one connect plus one call when connecting per call (p50).", ms(first), ms(pc.P50))
	ratio := float64(po.P50) / float64(pc.P50)
	s.note("by construction the best this set-up allows is work / (connect + work) = %.3f: a warm call still does its %s of work, so a pooled p50 near %.3f of connect-per-call means the pool adds next to nothing.",
		work.Seconds()/(connect+work).Seconds(), work, work.Seconds()/(connect+work).Seconds())
	s.highlight("Connect per call vs pooled (%s connect, %s work): warm p50 %s vs %s (%.0f× faster), p99 %s vs %s; the first pooled call (cold pool) %s.",
		connect, work, ms(po.P50), ms(pc.P50), 1/ratio, ms(po.P99), ms(pc.P99), ms(first))
	s.Targets = append(s.Targets, Target{
		Goal:     "pooled warm p50 at most a tenth of connect-per-call",
		Measured: fmt.Sprintf("%.3f (1/%.0f: %s vs %s)", ratio, 1/ratio, ms(po.P50), ms(pc.P50)),
		Met:      ratio <= 0.1,
		Why:      whyIf(ratio > 0.1, "the warm call still pays the app's own work time; with a connect cost below 9× the work, a tenth is out of reach by construction"),
	})
	e.addChart(s, "headline.png", "connect per call vs pooled latency", func(dir, file string) error {
		return barChart(dir, file, "Connect per call vs pooled (lower is better)", "latency, ms", []string{"first call", "p50", "p95", "p99"},
			[]series{
				{"connect per call", []float64{msf(perCallFirst), msf(pc.P50), msf(pc.P95), msf(pc.P99)}},
				{"pooled", []float64{msf(first), msf(po.P50), msf(po.P95), msf(po.P99)}},
			})
	})
	return nil
}
