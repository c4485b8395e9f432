package bench

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i))
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {95, 95}, {99, 99}, {100, 100}, {0.1, 1}} {
		if got := Percentile(s, tc.p); got != tc.want {
			t.Errorf("Percentile(1..100, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v", got)
	}
	if got := Percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("Percentile([7], 99) = %v", got)
	}
}

func TestRecorderSummary(t *testing.T) {
	r := NewRecorder()
	for _, d := range []time.Duration{3, 1, 2} {
		r.Add(d)
	}
	r.Fail("boom")
	r.Fail("boom")
	s := r.Summary()
	if s.N != 3 || s.Failed != 2 || s.Min != 1 || s.Max != 3 || s.P50 != 2 || s.Mean != 2 {
		t.Errorf("Summary = %+v", s)
	}
}

func TestParseGoBench(t *testing.T) {
	out := `goos: linux
BenchmarkAcquireRelease/gradiopool/1-2         	 5000000	       230.5 ns/op	       0 B/op	       0 allocs/op
BenchmarkAcquireRelease/puddle/500on50-2       	  100000	      1234 ns/op	      48 B/op	       1 allocs/op
BenchmarkOther 10 5 ns/op
PASS`
	got := parseGoBench(out)
	if len(got) != 3 {
		t.Fatalf("parsed %d lines, want 3: %+v", len(got), got)
	}
	if g := got[0]; g.Name != "AcquireRelease/gradiopool/1" || g.N != 5000000 || g.NsPerOp != 230.5 || g.BytesPerOp != 0 || g.AllocsPerOp != 0 {
		t.Errorf("line 1 = %+v", g)
	}
	if g := got[1]; g.Name != "AcquireRelease/puddle/500on50" || g.BytesPerOp != 48 || g.AllocsPerOp != 1 {
		t.Errorf("line 2 = %+v", g)
	}
	if g := got[2]; g.Name != "Other" || g.BytesPerOp != -1 {
		t.Errorf("line 3 = %+v", g)
	}
}

func TestOpenLoopCountsEveryCall(t *testing.T) {
	errOdd := errors.New("odd")
	n := 0
	res := OpenLoop(context.Background(), 1000, 50*time.Millisecond, func(context.Context) error {
		return nil
	}, nil)
	n = res.Latency.N + res.Latency.Failed
	if res.Planned != 50 || res.Started != 50 || n != 50 {
		t.Errorf("planned %d started %d returned %d, want 50 each", res.Planned, res.Started, n)
	}
	res = OpenLoop(context.Background(), 1000, 10*time.Millisecond, func(context.Context) error { return errOdd },
		func(err error) string { return "odd" })
	if res.Latency.Errors["odd"] != 10 {
		t.Errorf("errors = %v, want odd: 10", res.Latency.Errors)
	}
}

func parkForCensus(ch chan struct{}) { <-ch }

func TestGoroutineCensus(t *testing.T) {
	before := goroutineCensus()
	ch := make(chan struct{})
	done := make(chan struct{}, 3)
	for range 3 {
		go func() { parkForCensus(ch); done <- struct{}{} }()
	}
	// The goroutines are started by the closure in this test.
	want := "github.com/gradiopool/gradiopool/bench.TestGoroutineCensus.func1"
	var got int
	for range 100 {
		got = censusDelta(goroutineCensus(), before)[want]
		if got == 3 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(ch)
	for range 3 {
		<-done
	}
	if got != 3 {
		t.Errorf("census counted %d goroutines started by %s, want 3; census: %v", got, want, goroutineCensus())
	}
}

func TestByPosition(t *testing.T) {
	t0 := time.Now()
	// Arrival order is the reverse of the index order.
	starts := []time.Time{t0.Add(3), t0.Add(2), t0.Add(1), t0}
	late := []time.Duration{4 * time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 1 * time.Millisecond}
	xs, ys := byPosition(starts, late, 2)
	if len(xs) != 2 || xs[0] != 0 || xs[1] != 2 || ys[0] != 1.5 || ys[1] != 3.5 {
		t.Errorf("byPosition = %v, %v; want [0 2], [1.5 3.5]", xs, ys)
	}
}

func TestMergeOpenLoop(t *testing.T) {
	a := OpenLoop(context.Background(), 1000, 5*time.Millisecond, func(context.Context) error { return nil }, nil)
	b := OpenLoop(context.Background(), 1000, 5*time.Millisecond, func(context.Context) error { return errors.New("x") }, func(error) string { return "x" })
	m := mergeOpenLoop([]OpenLoopResult{a, b})
	if m.Planned != 10 || m.Latency.N != 5 || m.Latency.Errors["x"] != 5 {
		t.Errorf("merged: planned %d, ok %d, errors %v; want 10, 5, x: 5", m.Planned, m.Latency.N, m.Latency.Errors)
	}
}
