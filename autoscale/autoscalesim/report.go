package autoscalesim

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/autoscale"
)

// Policies are the compared policies: the baselines and the autoscale
// policy at its defaults.
func Policies() []Policy {
	return []Policy{
		{Name: "always-on"},
		{Name: "hf-sleep-15m", SleepTime: 900},
		{Name: "reactive-zero", Reactive: true, ReactiveIdle: time.Minute},
		{Name: "autoscale", Autoscale: &autoscale.Config{}},
		{Name: "autoscale-sleep", Autoscale: &autoscale.Config{Lever: autoscale.LeverSleep}},
	}
}

// Floor is the fewest GPU-hours any policy could bill on the trace's
// first seed while keeping the expected busy slots at most u of the awake
// replicas' (at least one awake): perfect foresight, wakes and parks
// instant and free, minute by minute. It is computed from the trace's
// rate, not simulated: a bound, not a policy.
func Floor(p Params, tr Trace, u float64) float64 {
	rate := tr.Setup(rand.New(rand.NewPCG(p.Seed, 0x5a5a)), p)
	mean := p.Service.Seconds() * math.Exp(p.ServiceSig*p.ServiceSig/2)
	total := 0.0
	for t := time.Duration(0); t < time.Duration(p.Days)*24*time.Hour; t += time.Minute {
		total += float64(floorReplicas(p, rate(t)*mean, u)) / 60
	}
	return total
}

// floorReplicas is the Floor's replicas for busy slots at utilization u.
func floorReplicas(p Params, busy, u float64) int {
	n := max(1, int(math.Ceil(busy/(float64(p.Capacity)*u)-1e-9)))
	return min(n, p.Replicas)
}

// Sweep are variants of the policy's main knobs for the GPU-hours vs p95
// trade-off.
func Sweep() []Policy {
	var out []Policy
	zero, one := 0, 1
	for _, m := range []*int{&zero, &one} {
		for _, pa := range []time.Duration{5 * time.Minute, 15 * time.Minute, 30 * time.Minute} {
			for _, u := range []float64{0.6, 0.8, 1.0} {
				out = append(out, Policy{Name: fmt.Sprintf("min_awake=%d park_after=%v util=%.1f", *m, pa, u),
					Autoscale: &autoscale.Config{MinAwake: m, ParkAfter: pa, Utilization: u}})
			}
		}
	}
	return out
}

// Agg is the mean of a policy's results over seeds (p95 and p99: mean of
// the seeds' values; maxima: the largest).
type Agg struct {
	Trace, Policy                 string
	Seeds                         int
	GPUHours, Dollars             float64
	Calls, Failed, StateLost      float64
	P50, P95, P99                 time.Duration
	ActionsPerReplicaDay          float64
	MaxActionsHour, MaxActionsDay int
	HubCallsMax                   int
	HubCallsMean                  float64
	// Forecast against what came (Result.ForecastVsDemand and the
	// others), means over the seeds; 0 when not measured.
	ForecastVsDemand, ForecastVsInUse, ForecastVsOffered float64
	// ByHour: Result.ByHour, means over the seeds.
	ByHour [24]HourFigures
}

func aggregate(rs []Result) Agg {
	a := Agg{Trace: rs[0].Trace, Policy: rs[0].Policy, Seeds: len(rs)}
	n := float64(len(rs))
	for _, r := range rs {
		a.GPUHours += r.GPUHours / n
		a.Dollars += r.Dollars / n
		a.Calls += float64(r.Calls) / n
		a.Failed += float64(r.Failed) / n
		a.StateLost += float64(r.StateLost) / n
		a.P50 += time.Duration(float64(r.P50) / n)
		a.P95 += time.Duration(float64(r.P95) / n)
		a.P99 += time.Duration(float64(r.P99) / n)
		a.ActionsPerReplicaDay += r.ActionsPerReplicaDay / n
		a.MaxActionsHour = max(a.MaxActionsHour, r.MaxActionsHour)
		a.MaxActionsDay = max(a.MaxActionsDay, r.MaxActionsDay)
		a.HubCallsMax = max(a.HubCallsMax, r.HubCallsPer5MinMax)
		a.HubCallsMean += r.HubCallsPer5MinMean / n
		a.ForecastVsDemand += r.ForecastVsDemand / n
		a.ForecastVsInUse += r.ForecastVsInUse / n
		a.ForecastVsOffered += r.ForecastVsOffered / n
		for i, h := range r.ByHour {
			a.ByHour[i].Billed += h.Billed / n
			a.ByHour[i].Floor += h.Floor / n
			a.ByHour[i].Offered += h.Offered / n
		}
	}
	return a
}

// HourTable writes, for a run's policy, the Spaces it billed beside the
// Floor's by hour of the day, and the GPU-hours above the floor per day.
func HourTable(w io.Writer, a Agg) {
	fmt.Fprintln(w, "| hour (UTC) | offered load (busy slots) | floor's replicas | billed Spaces | above the floor |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	var over, rising float64
	for i, h := range a.ByHour {
		fmt.Fprintf(w, "| %02d | %.2f | %.2f | %.2f | %+.2f |\n", i, h.Offered, h.Floor, h.Billed, h.Billed-h.Floor)
		over += h.Billed - h.Floor
		if h.Offered > a.ByHour[(i+23)%24].Offered {
			rising += h.Billed - h.Floor
		}
	}
	fmt.Fprintf(w, "| day | | | | %+.1f GPU-hours |\n", over)
	fmt.Fprintf(w, "\nA day: %.1f GPU-hours above the floor, %.1f in the hours the load rises and %.1f in those it falls or holds.\n", over, rising, over-rising)
}

// Compare runs every policy on every trace for seeds 1..seeds.
func Compare(ctx context.Context, p Params, seeds int, traces []Trace, pols []Policy, progress io.Writer) ([]Agg, error) {
	var out []Agg
	for _, tr := range traces {
		for _, pol := range pols {
			var rs []Result
			for s := 1; s <= seeds; s++ {
				q := p
				q.Seed = uint64(s)
				start := time.Now()
				r, err := Run(ctx, q, tr, pol)
				if err != nil {
					return out, err
				}
				if progress != nil {
					fmt.Fprintf(progress, "%s %s seed %d: %.1f GPU-h p95 %v failed %d (%v)\n", tr.Name, pol.Name, s, r.GPUHours, r.P95.Round(time.Second), r.Failed, time.Since(start).Round(time.Millisecond))
				}
				rs = append(rs, r)
			}
			out = append(out, aggregate(rs))
		}
	}
	return out, nil
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }

// Table writes aggs as a Markdown table.
func Table(w io.Writer, aggs []Agg) {
	fmt.Fprintln(w, "| trace | policy | GPU-hours | $ | p50 s | p95 s | p99 s | calls | failed | gr.State lost | actions/replica/day | max actions in 1 h / 24 h (one replica) | Hub calls per 5 min (mean / max) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, a := range aggs {
		fmt.Fprintf(w, "| %s | %s | %.1f | %.0f | %s | %s | %s | %.0f | %.1f | %.1f | %.2f | %d / %d | %.1f / %d |\n",
			a.Trace, a.Policy, a.GPUHours, a.Dollars, secs(a.P50), secs(a.P95), secs(a.P99), a.Calls, a.Failed, a.StateLost,
			a.ActionsPerReplicaDay, a.MaxActionsHour, a.MaxActionsDay, a.HubCallsMean, a.HubCallsMax)
	}
}

// ForecastTable writes, for the runs whose forecast was measured, the
// forecast against what came one lead later (Result.ForecastVsDemand).
func ForecastTable(w io.Writer, aggs []Agg) {
	fmt.Fprintln(w, "| trace | policy | forecast / demand (in use + waiting) | forecast / calls in use | forecast / offered load |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|")
	for _, a := range aggs {
		if a.ForecastVsDemand == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %.3f | %.3f | %.3f |\n", a.Trace, a.Policy, a.ForecastVsDemand, a.ForecastVsInUse, a.ForecastVsOffered)
	}
}

// Goals checks issue 34's goals on aggs and says which are met; with p,
// it adds the diurnal trace's floor (Floor) to read the first goal by.
func Goals(w io.Writer, aggs []Agg, p *Params) {
	get := func(trace, pol string) *Agg { return find(aggs, trace, pol) }
	yes := metWord
	on, sl, as := get("diurnal", "always-on"), get("diurnal", "hf-sleep-15m"), get("diurnal", "autoscale")
	if on != nil && sl != nil && as != nil {
		fmt.Fprintf(w, "- Diurnal, vs always-on: GPU-hours %.2fx (goal <= 0.60: %s), p95 %.2fx (goal <= 1.25: %s), failed calls %.1f vs %.1f (goal no more: %s).\n",
			as.GPUHours/on.GPUHours, yes(as.GPUHours <= 0.60*on.GPUHours), float64(as.P95)/float64(on.P95), yes(float64(as.P95) <= 1.25*float64(on.P95)),
			as.Failed, on.Failed, yes(as.Failed <= on.Failed))
		if p != nil {
			f8, f1 := Floor(*p, Diurnal(*p), 0.8), Floor(*p, Diurnal(*p), 1.0)
			fmt.Fprintf(w, "  - The trace's floor (`autoscalesim.Floor`: perfect foresight, wakes and parks instant and free, at least one replica awake, minute by minute, from the trace's rate): %.1f GPU-hours (%.2fx always-on) keeping the busy slots at most 80%% of the awake ones', %.1f (%.2fx) at 100%% (every awake slot busy on average, so calls would queue); the goal of 0.60x lies below both. The policy bills %.2fx the 80%% floor.\n",
				f8, f8/on.GPUHours, f1, f1/on.GPUHours, as.GPUHours/f8)
		}
		fmt.Fprintf(w, "- Diurnal, vs sleep after 15 min: p95 %.2fx (goal <= 0.5: %s) at %.2fx its GPU-hours (goal <= 1.1: %s).\n",
			float64(as.P95)/float64(sl.P95), yes(float64(as.P95) <= 0.5*float64(sl.P95)), as.GPUHours/sl.GPUHours, yes(as.GPUHours <= 1.1*sl.GPUHours))
		if p != nil && sl.ActionsPerReplicaDay == 0 {
			fmt.Fprintf(w, "  - Sleep after 15 min never slept on this trace (0 actions: every Space is called every few minutes all night), so its p95 is always-on's, and half of it is below the calls' own service time (p95 of a %v-median lognormal call alone is about %.0f s): this goal cannot be met on this trace by any policy.\n",
				p.Service, p.Service.Seconds()*math.Exp(1.645*p.ServiceSig))
		}
	}
	fo, fa := get("flat", "always-on"), get("flat", "autoscale")
	if fo != nil && fa != nil {
		fmt.Fprintf(w, "- Flat: GPU-hours %.3fx always-on's (goal >= 0.98, no harm where nothing can be saved: %s); p95 %.2fx.\n",
			fa.GPUHours/fo.GPUHours, yes(fa.GPUHours >= 0.98*fo.GPUHours), float64(fa.P95)/float64(fo.P95))
	}
	worstH, worstD := 0, 0
	for _, a := range aggs {
		if strings.HasPrefix(a.Policy, "autoscale") {
			worstH, worstD = max(worstH, a.MaxActionsHour), max(worstD, a.MaxActionsDay)
		}
	}
	fmt.Fprintf(w, "- Flap budget (4 per hour, 24 per day per replica) at the defaults: at most %d in an hour and %d in a day on one replica (%s).\n",
		worstH, worstD, yes(worstH <= 4 && worstD <= 24))
}

// LoadTable writes, per trace, the autoscale policy's GPU-hours and p95
// beside always-on's and the trace's floor at 80% (Floor): how much a
// trace's load leaves to save.
func LoadTable(w io.Writer, aggs []Agg, p Params, traces []Trace) {
	fmt.Fprintln(w, "| trace | always-on GPU-hours | floor at 80% (x always-on) | autoscale GPU-hours (x always-on) | autoscale / floor | p95 always-on / autoscale s | failed (autoscale) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, tr := range traces {
		on, as := find(aggs, tr.Name, "always-on"), find(aggs, tr.Name, "autoscale")
		if on == nil || as == nil {
			continue
		}
		f := Floor(p, tr, 0.8)
		fmt.Fprintf(w, "| %s | %.1f | %.1f (%.2fx) | %.1f (%.2fx) | %.2fx | %s / %s | %.1f |\n", tr.Name, on.GPUHours, f, f/on.GPUHours,
			as.GPUHours, as.GPUHours/on.GPUHours, as.GPUHours/f, secs(on.P95), secs(as.P95), as.Failed)
	}
}

// SleepTable writes, per trace, Hugging Face's sleep after 15 min beside
// the autoscale policy, against issue 34's second goal: at most half its
// p95 at no more than 1.1x its GPU-hours.
func SleepTable(w io.Writer, aggs []Agg, traces []Trace) {
	fmt.Fprintln(w, "| trace | calls | hf-sleep-15m GPU-hours | hf-sleep-15m p95 s | autoscale GPU-hours (x hf-sleep-15m) | autoscale p95 s (x hf-sleep-15m) | goal (p95 <= 0.5x at <= 1.1x) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|")
	for _, tr := range traces {
		hf, as := find(aggs, tr.Name, "hf-sleep-15m"), find(aggs, tr.Name, "autoscale")
		if hf == nil || as == nil {
			continue
		}
		g, l := as.GPUHours/hf.GPUHours, as.P95.Seconds()/hf.P95.Seconds()
		fmt.Fprintf(w, "| %s | %.0f | %.1f | %s | %.1f (%.2fx) | %s (%.2fx) | %s |\n", tr.Name, hf.Calls, hf.GPUHours, secs(hf.P95),
			as.GPUHours, g, secs(as.P95), l, metWord(l <= 0.5 && g <= 1.1))
	}
}

// find is the aggregate of policy on trace, nil if none.
func find(aggs []Agg, trace, policy string) *Agg {
	for i := range aggs {
		if aggs[i].Trace == trace && aggs[i].Policy == policy {
			return &aggs[i]
		}
	}
	return nil
}

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
