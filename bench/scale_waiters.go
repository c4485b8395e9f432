package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// scaleWaiters queues 10 000 callers on a full session pool and measures
// their memory and how punctually each one's time-out fires.
func scaleWaiters(ctx context.Context, e *env, s *Section) error {
	n := e.pickInt(10_000, 10_000)
	if raceEnabled {
		n = 2_000
		s.note("built with the race detector (at most 8128 live goroutines): %d waiters instead of 10 000", n)
	}
	timeout := e.pick(3*time.Second, time.Second)
	sp, err := sessionpool.New(sessionpool.Config[int]{
		Connect:      func(context.Context) (int, error) { return 1, nil },
		Close:        func(int) {},
		MinSessions:  1,
		MaxSessions:  1,
		MaxWaiters:   n + 1,
		QueueTimeout: timeout,
	})
	if err != nil {
		return err
	}
	defer sp.Close(context.WithoutCancel(ctx))
	holder, err := sp.Acquire(ctx)
	if err != nil {
		return err
	}
	base := ReadMem()
	lateness := make([]time.Duration, n)
	starts := make([]time.Time, n)
	errCounts := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			starts[i] = t0
			sess, err := sp.Acquire(ctx)
			lateness[i] = time.Since(t0) - timeout
			if err == nil {
				sess.Release()
			}
			class := "ok (served)"
			switch {
			case errors.Is(err, sessionpool.ErrQueueTimeout):
				class = "queue timeout"
			case err != nil:
				class = err.Error()
			}
			mu.Lock()
			errCounts[class]++
			mu.Unlock()
		}()
	}
	deadline := time.Now().Add(timeout / 2)
	for sp.Stat().Waiting < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	waiting := sp.Stat().Waiting
	held := ReadMem()
	wg.Wait()
	holder.Release()
	if waiting < n {
		return fmt.Errorf("only %d of %d waiters were queued at once", waiting, n)
	}
	d := held.Sub(base)
	sum := Summarize(slices.Clone(lateness), nil)
	// Control: the same number of goroutines each waiting on a bare timer
	// for the same time. Its lateness is the runtime's floor on this
	// machine (waking 10 000 goroutines at about the same moment); what
	// the pool adds is the difference.
	bare := make([]time.Duration, n)
	bareStarts := make([]time.Time, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			bareStarts[i] = t0
			t := time.NewTimer(timeout)
			<-t.C
			bare[i] = time.Since(t0) - timeout
		}()
	}
	wg.Wait()
	bareSum := Summarize(slices.Clone(bare), nil)
	s.Tables = append(s.Tables, Table{
		Caption: fmt.Sprintf("Waiters: %d callers of `sessionpool.Acquire` on a pool whose only session is taken; `QueueTimeout` %s. Memory is read while all of them wait; "+
			"lateness is how long after its own deadline each waiter got its error.", n, timeout),
		Header: []string{"waiters", "heap", "stacks", "per waiter (heap / stack)", "lateness p50", "p99", "max", "min", "outcomes"},
		Rows: [][]string{{
			fmt.Sprint(n), kib(float64(d.Heap)), kib(float64(d.Stack)),
			fmt.Sprintf("%.0f B / %.1f KiB", float64(d.Heap)/float64(n), float64(d.Stack)/float64(n)/1024),
			ms(sum.P50), ms(sum.P99), ms(sum.Max), signedMs(sum.Min), countsCell(errCounts),
		}, {
			fmt.Sprintf("control: %d bare timers", n), "", "", "",
			ms(bareSum.P50), ms(bareSum.P99), ms(bareSum.Max), signedMs(bareSum.Min), "",
		}},
	})
	s.highlight("%d waiters on a full pool: %.0f B of heap each (plus the waiting goroutine's stack); time-outs fired p50 %s, p99 %s after their deadline (bare timers: %s, %s).",
		n, float64(d.Heap)/float64(n), ms(sum.P50), ms(sum.P99), ms(bareSum.P50), ms(bareSum.P99))
	s.note("the stack share is the waiting goroutines' own (the harness's callers), not the pool's; the heap share is what the pool keeps per waiter (its wait-list entry and hand-off channel) plus what the waiting goroutine itself allocated.")
	vals := make([]float64, n)
	for i, l := range lateness {
		vals[i] = msf(l)
	}
	e.addChart(s, "waiters.png", "distribution of waiter time-out lateness", func(dir, file string) error {
		return histogram(dir, file, fmt.Sprintf("Time-out lateness of %d waiters", n), "ms after the deadline", vals, 40)
	})
	// Lateness along the queue: does it grow with the position (a serial
	// expiry) or stay flat?
	xs, poolLate := byPosition(starts, lateness, 100)
	_, bareLate := byPosition(bareStarts, bare, 100)
	if k := len(poolLate) / 10; k > 0 {
		first, last := meanF(poolLate[:k]), meanF(poolLate[len(poolLate)-k:])
		bFirst, bLast := meanF(bareLate[:min(k, len(bareLate))]), meanF(bareLate[max(0, len(bareLate)-k):])
		s.note("waiter lateness by queue position: the first tenth of the queue was %.1f ms late on average, the last tenth %.1f ms (bare timers: %.1f and %.1f ms). "+
			"A lateness that grows along the queue means the time-outs are served one after the other; a flat one would mean they fire independently.", first, last, bFirst, bLast)
	}
	e.addChart(s, "waiters-position.png", "time-out lateness by position in the queue, pool vs bare timers", func(dir, file string) error {
		return lineChart(dir, file, "Time-out lateness by queue position", "position (order of arrival)", "ms after the deadline", xs,
			[]series{{"sessionpool waiter", poolLate}, {"bare timer (control)", bareLate}})
	})
	return nil
}

// byPosition orders the lateness samples by start time and returns, for
// points evenly spaced positions, the mean lateness in ms of the samples
// around each.
func byPosition(starts []time.Time, late []time.Duration, points int) (xs, ys []float64) {
	idx := make([]int, len(starts))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return starts[a].Compare(starts[b]) })
	step := max(1, len(idx)/points)
	for lo := 0; lo < len(idx); lo += step {
		hi := min(lo+step, len(idx))
		var sum time.Duration
		for _, i := range idx[lo:hi] {
			sum += late[i]
		}
		xs = append(xs, float64(lo))
		ys = append(ys, msf(sum/time.Duration(hi-lo)))
	}
	return xs, ys
}

func countsCell(m map[string]int) string {
	out := ""
	for i, k := range sortedKeys(m) {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s: %d", k, m[k])
	}
	return out
}

func meanF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}
