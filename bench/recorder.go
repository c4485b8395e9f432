package bench

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Recorder collects latency samples. It is safe for concurrent use. It keeps
// every sample: a benchmark run records at most a few hundred thousand, and
// exact percentiles are easier to trust than a histogram's buckets.
type Recorder struct {
	mu        sync.Mutex // guards samples, errs and failTimes
	samples   []time.Duration
	errs      map[string]int
	failTimes []time.Duration
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{errs: map[string]int{}} }

// Add records one successful call's latency.
func (r *Recorder) Add(d time.Duration) {
	r.mu.Lock()
	r.samples = append(r.samples, d)
	r.mu.Unlock()
}

// Fail records one failed call under a short class name ("http 503",
// "queue timeout", ...).
func (r *Recorder) Fail(class string) {
	r.mu.Lock()
	r.errs[class]++
	r.mu.Unlock()
}

// snapshot returns a copy of the samples recorded so far.
func (r *Recorder) snapshot() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.samples)
}

// FailAfter records one failed call and how long it took to fail.
func (r *Recorder) FailAfter(class string, d time.Duration) {
	r.mu.Lock()
	r.errs[class]++
	r.failTimes = append(r.failTimes, d)
	r.mu.Unlock()
}

// FailTimes summarises how long the failed calls recorded with FailAfter
// took to fail.
func (r *Recorder) FailTimes() Summary {
	r.mu.Lock()
	f := slices.Clone(r.failTimes)
	r.mu.Unlock()
	return Summarize(f, nil)
}

// Summary returns the percentiles of the samples recorded so far.
func (r *Recorder) Summary() Summary {
	r.mu.Lock()
	s := slices.Clone(r.samples)
	errs := make(map[string]int, len(r.errs))
	for k, v := range r.errs {
		errs[k] = v
	}
	r.mu.Unlock()
	return Summarize(s, errs)
}

// Summary describes a set of latency samples. Durations are zero when there
// are no samples.
type Summary struct {
	N                  int // successful calls
	Failed             int // failed calls (sum of Errors)
	Errors             map[string]int
	Min, Mean, Max     time.Duration
	P50, P90, P95, P99 time.Duration
}

// Summarize computes a Summary from samples (which it sorts in place).
func Summarize(samples []time.Duration, errs map[string]int) Summary {
	s := Summary{N: len(samples), Errors: errs}
	for _, n := range errs {
		s.Failed += n
	}
	if len(samples) == 0 {
		return s
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, d := range samples {
		sum += d
	}
	s.Min, s.Max = samples[0], samples[len(samples)-1]
	s.Mean = sum / time.Duration(len(samples))
	s.P50 = Percentile(samples, 50)
	s.P90 = Percentile(samples, 90)
	s.P95 = Percentile(samples, 95)
	s.P99 = Percentile(samples, 99)
	return s
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted samples: the smallest sample such that at least p% of the samples
// are less than or equal to it.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}
