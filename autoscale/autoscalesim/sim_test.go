package autoscalesim

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func run(t *testing.T, days int, tr func(Params) Trace, pol Policy) Result {
	t.Helper()
	p := DefaultParams()
	p.Days = days
	r, err := Run(context.Background(), p, tr(p), pol)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func idle(Params) Trace {
	return Trace{Name: "idle", Setup: func(*rand.Rand, Params) func(time.Duration) float64 {
		return func(time.Duration) float64 { return 0 }
	}}
}

// The billing meter: always-on bills every hour of every replica; a
// Hugging Face sleep time of 15 min over no traffic bills 15 min each.
func TestBillingBaselines(t *testing.T) {
	on := run(t, 1, Flat, Policy{Name: "always-on"})
	if math.Abs(on.GPUHours-72) > 1e-6 || on.Failed != 0 || on.ActionsPerReplicaDay != 0 {
		t.Errorf("always-on: %+v", on)
	}
	sl := run(t, 1, idle, Policy{Name: "hf-sleep-15m", SleepTime: 900})
	if math.Abs(sl.GPUHours-0.75) > 1e-6 || sl.ActionsPerReplicaDay != 1 {
		t.Errorf("sleep over no traffic: %+v", sl)
	}
}

// The policy at its defaults saves GPU-hours on a diurnal trace without
// failing calls, and stays inside its flap budget.
func TestAutoscaleDiurnal(t *testing.T) {
	on := run(t, 2, Diurnal, Policy{Name: "always-on"})
	as := run(t, 2, Diurnal, Policies()[3])
	if as.GPUHours >= 0.9*on.GPUHours || as.Failed > on.Failed || as.MaxActionsHour > 4 || as.MaxActionsDay > 24 {
		t.Errorf("autoscale %+v\nalways-on %+v", as, on)
	}
	if as.Calls != on.Calls {
		t.Errorf("the same seed drew %d and %d calls", as.Calls, on.Calls)
	}
	again := run(t, 2, Diurnal, Policies()[3])
	if again.Calls != as.Calls || again.Failed != as.Failed {
		t.Errorf("not repeatable: %+v vs %+v", again, as)
	}
}

// min_awake 0 over no traffic pauses everything after park_after.
func TestAutoscaleIdleScalesToZero(t *testing.T) {
	zero := 0
	pol := Policies()[3]
	cfg := *pol.Autoscale
	cfg.MinAwake = &zero
	pol.Autoscale = &cfg
	r := run(t, 1, idle, pol)
	if r.GPUHours > 3*0.26 {
		t.Errorf("idle day: %.2f GPU-hours", r.GPUHours)
	}
}

// forecastBias pairs each forecast from the second day on with the tick
// one lead later (rounded up to a tick) and skips the first day.
func TestForecastBiasPairsALeadLater(t *testing.T) {
	start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	step := 5 * time.Second
	var ts []tickSample
	for i := range 2 * 24 * 3600 / 5 {
		at := start.Add(time.Duration(i) * step)
		// demand i, all in use; forecast: the demand of the
		// tick 2 ahead, which a lead of 7 s (rounded up: 2 ticks) finds
		ts = append(ts, tickSample{at: at, forecast: float64(i + 2), lead: 7 * time.Second,
			demand: float64(i), inUse: i, offered: 2 * float64(i)})
	}
	d, u, o := forecastBias(ts, start, step)
	if d != 1 || u != 1 || o != 0.5 {
		t.Errorf("forecastBias = %v, %v, %v; want 1, 1, 0.5", d, u, o)
	}
	if d, u, o := forecastBias(ts[:24*3600/5], start, step); d != 0 || u != 0 || o != 0 {
		t.Errorf("one day: %v, %v, %v; want none measured", d, u, o)
	}
}

// ByHour: always-on bills every Space every hour of the day, and the
// Floor's replicas by hour, summed over the days after the first, are the
// Floor over those days.
func TestByHourAgainstTheFloor(t *testing.T) {
	p := DefaultParams()
	p.Days = 2
	on := run(t, 2, Diurnal, Policy{Name: "always-on"})
	var floorDay float64
	for i, h := range on.ByHour {
		if h.Billed != float64(p.Replicas) || h.Floor < 1 || h.Floor > float64(p.Replicas) {
			t.Errorf("hour %02d: %+v", i, h)
		}
		floorDay += h.Floor
	}
	whole := Floor(p, Diurnal(p), 0.8)
	p.Days = 1
	first := Floor(p, Diurnal(p), 0.8)
	if math.Abs(floorDay-(whole-first)) > 1e-6 {
		t.Errorf("the hours' floor sums to %.4f, the Floor of the second day is %.4f", floorDay, whole-first)
	}
}

// SleepTable reads issue 34's second goal per trace: at most half the p95
// of sleep after 15 min at no more than 1.1x its GPU-hours.
func TestSleepTableReadsTheGoal(t *testing.T) {
	p := DefaultParams()
	a, b := DiurnalAt(p, 0.001), DiurnalAt(p, 0.01)
	if a.Name != "diurnal-0.1" || b.Name != "diurnal-1" || DiurnalAt(p, 0.3).Name != "diurnal-30" {
		t.Fatalf("names %q %q %q", a.Name, b.Name, DiurnalAt(p, 0.3).Name)
	}
	aggs := []Agg{
		{Trace: a.Name, Policy: "hf-sleep-15m", GPUHours: 100, P95: 80 * time.Second},
		{Trace: a.Name, Policy: "autoscale", GPUHours: 110, P95: 40 * time.Second},
		{Trace: b.Name, Policy: "hf-sleep-15m", GPUHours: 100, P95: 80 * time.Second},
		{Trace: b.Name, Policy: "autoscale", GPUHours: 111, P95: 20 * time.Second},
	}
	var out strings.Builder
	SleepTable(&out, aggs, []Trace{a, b, Flat(p)})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasSuffix(lines[2], "| met |") || !strings.HasSuffix(lines[3], "| NOT met |") {
		t.Fatalf("table:\n%s", out.String())
	}
}
