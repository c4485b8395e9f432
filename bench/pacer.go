package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// OpenLoopResult is what one paced run measured.
type OpenLoopResult struct {
	Rate     float64       // offered calls per second
	Planned  int           // calls the schedule asked for
	Started  int           // calls actually started (Planned unless ctx ended)
	Elapsed  time.Duration // from the first due time until the last call returned
	Latency  Summary       // measured from each call's due time
	FailedIn Summary       // how long the failed calls took to fail, from their due time
	MaxLag   time.Duration // worst delay between a call's due time and its start
	Achieved float64       // successful calls per second over Elapsed

	samples []time.Duration // the successful calls' latencies, for merging
}

// mergeOpenLoop combines runs at the same rate (slices of one measurement
// interleaved with other modes) into one result over all their samples.
func mergeOpenLoop(rs []OpenLoopResult) OpenLoopResult {
	var m OpenLoopResult
	errs := map[string]int{}
	var all []time.Duration
	for _, r := range rs {
		m.Rate = r.Rate
		m.Planned += r.Planned
		m.Started += r.Started
		m.Elapsed += r.Elapsed
		m.MaxLag = max(m.MaxLag, r.MaxLag)
		all = append(all, r.samples...)
		for k, v := range r.Latency.Errors {
			errs[k] += v
		}
	}
	m.samples = all
	m.Latency = Summarize(slices.Clone(all), errs)
	if m.Elapsed > 0 {
		m.Achieved = float64(m.Latency.N) / m.Elapsed.Seconds()
	}
	return m
}

// OpenLoop calls fn rate times per second for dur, each call in its own
// goroutine, whatever the latency of earlier calls (open-loop load: a slow
// system gets more calls in flight, not fewer calls). Latency is measured from
// the moment a call was due, not from when it started, so a late pacer or a
// slow start counts against the system (no coordinated omission).
//
// classify turns fn's error into a short class for the report; nil means
// "error". OpenLoop returns when every started call has returned.
func OpenLoop(ctx context.Context, rate float64, dur time.Duration, fn func(context.Context) error, classify func(error) string) OpenLoopResult {
	planned := int(rate * dur.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	rec := NewRecorder()
	var (
		wg      sync.WaitGroup
		maxLag  atomic.Int64
		started int
	)
	start := time.Now()
	for i := range planned {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		started++
		wg.Add(1)
		go func() {
			defer wg.Done()
			lag := time.Since(due)
			for {
				cur := maxLag.Load()
				if int64(lag) <= cur || maxLag.CompareAndSwap(cur, int64(lag)) {
					break
				}
			}
			err := fn(ctx)
			if err != nil {
				rec.FailAfter(classOf(err, classify), time.Since(due))
				return
			}
			rec.Add(time.Since(due))
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	s := rec.Summary()
	return OpenLoopResult{
		Rate:     rate,
		Planned:  planned,
		Started:  started,
		Elapsed:  elapsed,
		Latency:  s,
		FailedIn: rec.FailTimes(),
		MaxLag:   time.Duration(maxLag.Load()),
		Achieved: float64(s.N) / elapsed.Seconds(),
		samples:  rec.snapshot(),
	}
}

// ClosedLoopResult is what a closed-loop run measured.
type ClosedLoopResult struct {
	Workers    int
	Elapsed    time.Duration
	Latency    Summary // measured per call, from its start
	Throughput float64 // successful calls per second
}

// ClosedLoop runs workers goroutines, each calling fn back to back for dur
// (or until ctx ends). It measures the most a system can do: throughput at a
// fixed concurrency.
func ClosedLoop(ctx context.Context, workers int, dur time.Duration, fn func(context.Context) error, classify func(error) string) ClosedLoopResult {
	rec := NewRecorder()
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				if err := fn(ctx); err != nil {
					rec.Fail(classOf(err, classify))
					continue
				}
				rec.Add(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	s := rec.Summary()
	return ClosedLoopResult{Workers: workers, Elapsed: elapsed, Latency: s, Throughput: float64(s.N) / elapsed.Seconds()}
}

func classOf(err error, classify func(error) string) string {
	if classify != nil {
		if c := classify(err); c != "" {
			return c
		}
	}
	return "error"
}

// ClosedLoopN runs n calls of fn on workers goroutines, each worker calling
// back to back; fn gets the call's index. Latency is measured per call.
func ClosedLoopN(ctx context.Context, workers, n int, fn func(ctx context.Context, i int) error, classify func(error) string) ClosedLoopResult {
	rec := NewRecorder()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := fn(ctx, i); err != nil {
					rec.Fail(classOf(err, classify))
					continue
				}
				rec.Add(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	s := rec.Summary()
	return ClosedLoopResult{Workers: workers, Elapsed: elapsed, Latency: s, Throughput: float64(s.N) / elapsed.Seconds()}
}
