package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

// scaleInFlight holds 150 long calls open through the pool (50 per replica,
// the seed's maximum) and measures the memory each one costs.
func scaleInFlight(ctx context.Context, e *env, s *Section) error {
	const calls = 150
	hold := e.pick(8*time.Second, 2*time.Second)
	if raceEnabled && e.opts.Quick {
		hold = 3 * time.Second // the race detector slows the 150 Submits down
	}
	sm, err := e.startSims(ctx, simSpec{Replicas: 3}, true)
	if err != nil {
		return err
	}
	defer sm.Close()
	where := "in a separate process, so the figures are the pool's and the client's alone"
	if !sm.Remote {
		where = "inside this process (no helper-process command), so the figures include the simulated servers' own share of each call"
	}
	base := ReadMem()
	p, err := pool.New(pool.Config{Replicas: sm.URLs, MinConnections: 50, MaxConnections: 50, QueueTimeout: time.Minute})
	if err != nil {
		return err
	}
	defer p.Close(context.WithoutCancel(ctx))
	user := func(i int) string { return fmt.Sprintf("user%d@example.com", i) }
	// Warm 150 sessions: 150 short calls at once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var warmErr error
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Predict(ctx, user(i), "slow", 0.3); err != nil {
				mu.Lock()
				warmErr = errors.Join(warmErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if warmErr != nil {
		return fmt.Errorf("warming 150 sessions: %w", warmErr)
	}
	warm := ReadMem()
	total := statsNumbers(p)["totalConnections"]

	// 150 long calls, streamed (Submit + events), held open for hold.
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := p.Submit(callCtx, user(i), "slow", hold.Seconds())
			if err != nil {
				errs <- err
				return
			}
			for range c.Events() {
				// Drain the stream as a streaming caller would.
			}
			_, err = c.Wait(callCtx)
			errs <- err
		}()
	}
	// Wait until every call is in flight.
	deadline := time.Now().Add(hold / 2)
	for statsNumbers(p)["inUseConnections"] < calls && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	inUse := statsNumbers(p)["inUseConnections"]
	held := ReadMem()
	wg.Wait()
	close(errs)
	failed := 0
	var firstErr error
	for err := range errs {
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if inUse < calls {
		return fmt.Errorf("only %.0f of %d calls were in flight at once (failed: %d, first error: %v)", inUse, calls, failed, firstErr)
	}
	d := held.Sub(warm)
	sess := warm.Sub(base)
	perCall := float64(d.Total()) / calls
	s.Tables = append(s.Tables, Table{
		Caption: fmt.Sprintf("Calls in flight: %d long calls (`slow`, %s each, time-compressed from the seed's 5-10 minutes; each is a `Submit` whose event stream stays open) through `pool.Pool` to three replicas at 50 sessions each. The replicas ran %s.", calls, hold, where),
		Header:  []string{"what", "heap", "stacks", "goroutines", "per unit (heap + stacks)"},
		Rows: [][]string{
			{fmt.Sprintf("%.0f idle warm sessions (vs empty)", total), kib(float64(sess.Heap)), kib(float64(sess.Stack)), fmt.Sprint(sess.Goroutines), kib(float64(sess.Total())/max(1, total)) + " per session"},
			{fmt.Sprintf("%d calls in flight (vs idle warm pool)", calls), kib(float64(d.Heap)), kib(float64(d.Stack)), fmt.Sprint(d.Goroutines), kib(perCall) + " per call"},
		},
	})
	if failed > 0 {
		s.note("calls in flight: %d of %d long calls failed (first: %v)", failed, calls, firstErr)
	}
	s.note("the caller's own goroutine per call (here the harness's) is counted in the in-flight figures: a gateway has one HTTP handler goroutine per call anyway.")
	s.Targets = append(s.Targets, Target{
		Goal:     "at most 64 KiB per call in flight",
		Measured: fmt.Sprintf("%s per call (%s heap + %s stacks, %.1f goroutines per call)", kib(perCall), kib(float64(d.Heap)/calls), kib(float64(d.Stack)/calls), float64(d.Goroutines)/calls),
		Met:      perCall <= 64*1024,
		Why:      whyIf(perCall > 64*1024, "see the goroutine count: each call holds a stream reader and buffers; the stacks dominate"),
	})
	return nil
}
