// Package autoscalesim replays a week of traffic against Spaces of the Hub
// emulation (gradiotest.Hub) on a fast clock, under the autoscale policy
// and its baselines, and measures billed GPU-hours, latency including
// waits, failed calls, gr.State sessions lost, actions and Hub calls
// (issue 34 item 6).
//
// The model: calls arrive as a Poisson process of a trace's rate; each
// belongs to one of Users users and runs a lognormal service time on a
// replica with a free slot (Capacity per replica) whose Space is RUNNING
// and not parked; others wait in one FIFO, and a call waiting longer than
// WaitTimeout fails. Each call start is a visit to the Space (it resets
// Hugging Face's sleep timer and wakes a STOPPED Space). A Space leaving
// the running stages fails the calls in flight there and loses its users'
// gr.State (counted when such a user comes back). The pool itself (its
// sessions, connects, failover) is not simulated: the waiting model is
// the one issue 34 item 3 asks of it.
package autoscalesim

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/autoscale"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// Params shape a run.
type Params struct {
	Days        int
	Replicas    int
	Capacity    int           // calls at once per replica
	Service     time.Duration // median service time
	ServiceSig  float64       // lognormal sigma of the service time
	BuildTime   time.Duration // median BUILDING after a restart
	StartTime   time.Duration // median APP_STARTING
	StartSig    float64       // lognormal sigma of both
	WaitTimeout time.Duration // a call waiting longer fails (autoscale.wake_timeout)
	Users       int
	Hardware    string
	Seed        uint64
	// Log receives the controller's action lines (nil: none).
	Log *slog.Logger
}

// DefaultParams: three l4x1 Spaces, 4 calls at once each, 8 s calls, a
// 90 s median wake (30 s build + 60 s start, sigma 0.3), 5 min wait limit.
func DefaultParams() Params {
	return Params{Days: 7, Replicas: 3, Capacity: 4, Service: 8 * time.Second, ServiceSig: 0.5,
		BuildTime: 30 * time.Second, StartTime: 60 * time.Second, StartSig: 0.3,
		WaitTimeout: 5 * time.Minute, Users: 300, Hardware: "l4x1", Seed: 1}
}

// Trace is a rate of arrivals (calls per second) over time since the start
// (a Monday 00:00 UTC).
type Trace struct {
	Name string
	// Setup runs once per run (e.g. to draw bursts) and returns the rate.
	Setup func(rng *rand.Rand, p Params) func(t time.Duration) float64
}

// Diurnal: 10:1 between the afternoon peak and the night, peak load about
// 70% of the replicas' slots.
func Diurnal(p Params) Trace {
	t := DiurnalAt(p, 0.7)
	t.Name = "diurnal"
	return t
}

// DiurnalAt is Diurnal's shape with its peak at frac of the replicas'
// slots, named "diurnal-N" for N percent (to a tenth).
func DiurnalAt(p Params, frac float64) Trace {
	peak := frac * float64(p.Replicas*p.Capacity) / p.Service.Seconds()
	return Trace{Name: fmt.Sprintf("diurnal-%g", math.Round(frac*1000)/10), Setup: func(*rand.Rand, Params) func(time.Duration) float64 {
		return func(t time.Duration) float64 {
			h := math.Mod(t.Hours(), 24)
			f := 0.55 - 0.45*math.Cos(2*math.Pi*(h-3)/24) // 0.1 at 03:00, 1.0 at 15:00
			return peak * f
		}
	}}
}

// Flat: a constant load of about 70% of the slots.
func Flat(p Params) Trace {
	r := 0.7 * float64(p.Replicas*p.Capacity) / p.Service.Seconds()
	return Trace{Name: "flat", Setup: func(*rand.Rand, Params) func(time.Duration) float64 {
		return func(time.Duration) float64 { return r }
	}}
}

// Bursty: a trickle (5% of the slots' load) with bursts of 5-20 minutes at
// 80% of the slots, on average every 3 hours, at random times.
func Bursty(p Params) Trace {
	hi := 0.8 * float64(p.Replicas*p.Capacity) / p.Service.Seconds()
	lo := hi / 16
	return Trace{Name: "bursty", Setup: func(rng *rand.Rand, p Params) func(time.Duration) float64 {
		type burst struct{ from, to time.Duration }
		var bs []burst
		end := time.Duration(p.Days) * 24 * time.Hour
		for t := time.Duration(rng.ExpFloat64() * float64(3*time.Hour)); t < end; t += time.Duration(rng.ExpFloat64() * float64(3*time.Hour)) {
			d := 5*time.Minute + time.Duration(rng.Float64()*float64(15*time.Minute))
			bs = append(bs, burst{t, t + d})
		}
		return func(t time.Duration) float64 {
			i := sort.Search(len(bs), func(i int) bool { return bs[i].to > t })
			if i < len(bs) && bs[i].from <= t {
				return hi
			}
			return lo
		}
	}}
}

// Policy is what manages the Spaces in a run.
type Policy struct {
	Name string
	// Autoscale: the controller with this config (nil for a baseline).
	Autoscale *autoscale.Config
	// SleepTime: Hugging Face's sleep time in seconds (0: never).
	SleepTime int
	// Reactive: scale to zero after ReactiveIdle without calls, wake on
	// waiting calls (Knative-like: no forecast, no minimum).
	Reactive     bool
	ReactiveIdle time.Duration
}

// Result is one run's figures.
type Result struct {
	Trace, Policy string
	Seed          uint64
	GPUHours      float64
	Dollars       float64
	Calls         int
	Failed        int
	StateLost     int
	P50, P95, P99 time.Duration
	// ActionsPerReplicaDay: pauses, stops, restarts and wakes.
	ActionsPerReplicaDay float64
	// MaxActionsHour / MaxActionsDay: the most on one replica in any hour
	// or day (pauses, stops, restarts and wakes of stopped Spaces).
	MaxActionsHour, MaxActionsDay int
	HubCallsPer5MinMax            int
	HubCallsPer5MinMean           float64
	// The controller's forecast against what came (autoscale policies,
	// from the second day on, once the profile knows a day): the sum of
	// the forecasts made at its ticks over the sum of what was seen one
	// forecast lead (Status.ForecastLeadSeconds) later: the demand as the
	// controller counts it (calls in use plus waiting), the calls in use
	// alone, and the trace's offered load (its rate times the mean call
	// time: the busy slots the Floor counts). 1 is unbiased; 0 when not
	// measured.
	ForecastVsDemand, ForecastVsInUse, ForecastVsOffered float64
	// ByHour, per hour of the day from the second day on (the first is
	// the profile's learning day): the Spaces billed and the Floor's
	// replicas at 80%, minute by minute, and the offered load.
	ByHour [24]HourFigures
}

// HourFigures are the means of one hour of the day over a run's days.
type HourFigures struct {
	Billed  float64 // Spaces in a billed stage (starting or running)
	Floor   float64 // the Floor's replicas at 80% for the offered load
	Offered float64 // the trace's rate times the mean call time: busy slots
	minutes int
}

// tickSample is what one controller tick forecast and saw.
type tickSample struct {
	at       time.Time
	forecast float64
	lead     time.Duration
	demand   float64
	inUse    int
	offered  float64
}

// forecastBias compares each tick's forecast from day 2 on with the
// sample one lead later (the first tick at or after it).
func forecastBias(ts []tickSample, start time.Time, step time.Duration) (vsDemand, vsInUse, vsOffered float64) {
	var f, d, u, o float64
	for i, x := range ts {
		if x.at.Sub(start) < 24*time.Hour {
			continue
		}
		j := i + int((x.lead+step-1)/step)
		if j >= len(ts) {
			break
		}
		f += x.forecast
		d += ts[j].demand
		u += float64(ts[j].inUse)
		o += ts[j].offered
	}
	if f == 0 || d == 0 || u == 0 || o == 0 {
		return 0, 0, 0
	}
	return f / d, f / u, f / o
}

type call struct {
	user    int
	arrived time.Time
	service time.Duration
	started time.Time
	replica int
}

type replica struct {
	id       string
	name     string
	parked   bool
	inflight []*call
	gen      int // Space restarts seen (gr.State lost at each)
	running  bool
	lastCall time.Time
}

// target is the simulated pool as the controller sees it.
type target struct {
	hub     *gradiotest.Hub
	reps    []*replica
	waiting *[]*call
	cap     int
}

func (t *target) find(name string) *replica {
	for _, r := range t.reps {
		if r.name == name {
			return r
		}
	}
	return nil
}

func (t *target) Load(name string) autoscale.Load {
	r := t.find(name)
	return autoscale.Load{InUse: len(r.inflight), Capacity: t.cap}
}
func (t *target) Waiting() int                  { return len(*t.waiting) }
func (t *target) SetParked(name string, p bool) { t.find(name).parked = p }

// Wake is a request to the replica's app (the sleep lever's wake).
func (t *target) Wake(name string) { t.hub.Visit(t.find(name).id) }

// clock is the run's fast clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// countingTransport counts Hub calls per 5-minute window of the fast clock.
type countingTransport struct {
	mu   sync.Mutex
	clk  *clock
	per  map[time.Time]int
	next http.RoundTripper
}

func (ct *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ct.mu.Lock()
	ct.per[ct.clk.Now().Truncate(5*time.Minute)]++
	ct.mu.Unlock()
	return ct.next.RoundTrip(r)
}

// tickEvery is how often the policies run (autoscale.interval's default).
const tickEvery = 5 * time.Second

// Run replays trace under policy.
func Run(ctx context.Context, p Params, tr Trace, pol Policy) (Result, error) {
	rng := rand.New(rand.NewPCG(p.Seed, 0xa5a5))
	rate := tr.Setup(rand.New(rand.NewPCG(p.Seed, 0x5a5a)), p)
	start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC) // a Monday
	clk := &clock{t: start}
	hub := gradiotest.NewHub()
	defer hub.Close()
	hub.SetClock(clk.Now)
	hub.SetStartTimes(p.BuildTime, p.StartTime)
	hub.SetStartSpread(p.StartSig, p.Seed)
	const token = "hf_sim_owner"
	hub.SetOwnerToken(token)

	var waiting []*call
	tg := &target{hub: hub, waiting: &waiting, cap: p.Capacity}
	var reps []autoscale.Replica
	for i := range p.Replicas {
		id := fmt.Sprintf("sim/app_%d", i+1)
		hub.AddSpaceURL(id, "http://127.0.0.1:1") // the app is simulated here, not served
		hub.SetHardware(id, p.Hardware)
		if pol.SleepTime > 0 {
			hub.SetSleepTime(id, pol.SleepTime)
		}
		r := &replica{id: id, name: fmt.Sprintf("app_%d", i+1), running: true, lastCall: start}
		tg.reps = append(tg.reps, r)
		reps = append(reps, autoscale.Replica{Name: r.name, Space: id})
	}
	ct := &countingTransport{clk: clk, per: map[time.Time]int{}, next: http.DefaultTransport}
	hc := &http.Client{Transport: ct, Timeout: 30 * time.Second}
	client := autoscale.NewHubClient(hub.URL, token, 1000, hc, clk.Now)
	var ctl *autoscale.Controller
	if pol.Autoscale != nil {
		cfg := *pol.Autoscale
		cfg.Mode = autoscale.ModeOn
		ctl = autoscale.New(cfg, client, tg, reps, p.Log, clk.Now)
	}

	users := make([]struct {
		rep, gen int
		seen     bool
	}, p.Users)
	var lat []float64
	var ticks []tickSample
	meanService := p.Service.Seconds() * math.Exp(p.ServiceSig*p.ServiceSig/2)
	res := Result{Trace: tr.Name, Policy: pol.Name, Seed: p.Seed}
	end := start.Add(time.Duration(p.Days) * 24 * time.Hour)
	draw := func(median time.Duration, sig float64) time.Duration {
		return time.Duration(float64(median) * math.Exp(sig*rng.NormFloat64()))
	}
	poisson := func(l float64) int { // Knuth, l is small
		n, q, e := 0, 1.0, math.Exp(-l)
		for {
			q *= rng.Float64()
			if q < e {
				return n
			}
			n++
		}
	}
	for now := start; now.Before(end); now = now.Add(time.Second) {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		clk.set(now)
		// Spaces' stages: calls in flight on a Space that stopped fail.
		for _, r := range tg.reps {
			st := hub.Stage(r.id)
			up := st == gradiotest.StageRunning
			if r.running && !up {
				r.gen++
				res.Failed += len(r.inflight)
				r.inflight = r.inflight[:0]
			}
			r.running = up
		}
		// Calls that end.
		for _, r := range tg.reps {
			keep := r.inflight[:0]
			for _, c := range r.inflight {
				if !now.Before(c.started.Add(c.service)) {
					lat = append(lat, now.Sub(c.arrived).Seconds())
					continue
				}
				keep = append(keep, c)
			}
			r.inflight = keep
		}
		// Arrivals.
		for range poisson(rate(now.Sub(start))) {
			waiting = append(waiting, &call{user: rng.IntN(p.Users), arrived: now, service: draw(p.Service, p.ServiceSig)})
			res.Calls++
		}
		// Time-outs.
		keep := waiting[:0]
		for _, c := range waiting {
			if now.Sub(c.arrived) >= p.WaitTimeout {
				res.Failed++
				continue
			}
			keep = append(keep, c)
		}
		waiting = keep
		// Start waiting calls, FIFO, on the least loaded usable replica.
		for len(waiting) > 0 {
			var best *replica
			bi := -1
			for i, r := range tg.reps {
				if r.running && !r.parked && len(r.inflight) < p.Capacity && (best == nil || len(r.inflight) < len(best.inflight)) {
					best, bi = r, i
				}
			}
			if best == nil {
				break
			}
			c := waiting[0]
			waiting = waiting[1:]
			c.started, c.replica = now, bi
			best.inflight = append(best.inflight, c)
			best.lastCall = now
			hub.Visit(best.id)
			u := &users[c.user]
			if u.seen && tg.reps[u.rep].gen != u.gen {
				res.StateLost++
			}
			u.rep, u.gen, u.seen = bi, best.gen, true
		}
		// Waiting calls reach the Spaces that cannot serve them: a STOPPED
		// one wakes on such a visit (Hugging Face's sleep), a PAUSED one not.
		if need := (len(waiting) + p.Capacity - 1) / p.Capacity; need > 0 && pol.SleepTime > 0 {
			for _, r := range tg.reps {
				if need == 0 {
					break
				}
				if st := hub.Stage(r.id); st == gradiotest.StageStopped {
					hub.Visit(r.id)
					need--
				} else if st == gradiotest.StageAppStarting {
					need--
				}
			}
		}
		if t := now.Sub(start); t >= 24*time.Hour && t%time.Minute == 0 {
			h := &res.ByHour[now.Hour()]
			for _, r := range tg.reps {
				switch hub.Stage(r.id) {
				case gradiotest.StageAppStarting, gradiotest.StageRunning, gradiotest.StageRunningBuilding, gradiotest.StageRunningAppStarting:
					h.Billed++
				}
			}
			busy := rate(t) * meanService
			h.Floor += float64(floorReplicas(p, busy, 0.8))
			h.Offered += busy
			h.minutes++
		}
		// Policies.
		switch {
		case ctl != nil && now.Sub(start)%tickEvery == 0:
			ctl.Tick(ctx)
			st := ctl.Status()
			inUse := 0
			for _, r := range tg.reps {
				inUse += len(r.inflight)
			}
			ticks = append(ticks, tickSample{at: now, forecast: st.Forecast, demand: st.Demand, inUse: inUse,
				lead:    time.Duration(st.ForecastLeadSeconds * float64(time.Second)),
				offered: rate(now.Sub(start)) * meanService})
		case pol.Reactive && now.Sub(start)%tickEvery == 0:
			reactive(ctx, client, hub, tg, now, pol, p, len(waiting))
		}
	}
	clk.set(end)
	for _, r := range tg.reps {
		b := hub.Bill(r.id)
		res.GPUHours += b.Seconds / 3600
		res.Dollars += b.Dollars
	}
	sort.Float64s(lat)
	pct := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return time.Duration(lat[min(len(lat)-1, int(q*float64(len(lat))))] * float64(time.Second))
	}
	res.P50, res.P95, res.P99 = pct(0.50), pct(0.95), pct(0.99)
	res.ForecastVsDemand, res.ForecastVsInUse, res.ForecastVsOffered = forecastBias(ticks, start, tickEvery)
	for i := range res.ByHour {
		if h := &res.ByHour[i]; h.minutes > 0 {
			m := float64(h.minutes)
			h.Billed, h.Floor, h.Offered = h.Billed/m, h.Floor/m, h.Offered/m
		}
	}
	acts := 0
	for _, r := range tg.reps {
		var done []time.Time
		tr := hub.Transitions(r.id)
		for i, x := range tr {
			switch x.Stage {
			case gradiotest.StagePaused, gradiotest.StageBuilding, gradiotest.StageStopped:
				done = append(done, x.At)
				acts++
			case gradiotest.StageAppStarting:
				// a wake from STOPPED; after a build it is the same action
				if i == 0 || tr[i-1].Stage != gradiotest.StageBuilding {
					done = append(done, x.At)
					acts++
				}
			}
		}
		sort.Slice(done, func(i, j int) bool { return done[i].Before(done[j]) })
		for i := range done {
			h, d := 0, 0
			for j := i; j < len(done); j++ {
				if done[j].Sub(done[i]) < time.Hour {
					h++
				}
				if done[j].Sub(done[i]) < 24*time.Hour {
					d++
				}
			}
			res.MaxActionsHour = max(res.MaxActionsHour, h)
			res.MaxActionsDay = max(res.MaxActionsDay, d)
		}
	}
	res.ActionsPerReplicaDay = float64(acts) / float64(p.Replicas*p.Days)
	n := 0
	for w := start; w.Before(end); w = w.Add(5 * time.Minute) {
		c := ct.per[w]
		res.HubCallsPer5MinMax = max(res.HubCallsPer5MinMax, c)
		res.HubCallsPer5MinMean += float64(c)
		n++
	}
	res.HubCallsPer5MinMean /= float64(max(n, 1))
	return res, nil
}

// reactive is a Knative-like scale to zero: a replica without calls for
// ReactiveIdle is paused; when calls wait and nothing awake can take them,
// enough replicas are restarted at once. No forecast, no minimum, no
// budget.
func reactive(ctx context.Context, hc *autoscale.HubClient, hub *gradiotest.Hub, tg *target, now time.Time, pol Policy, p Params, waiting int) {
	waking := 0
	for _, r := range tg.reps {
		st := hub.Stage(r.id)
		if st == gradiotest.StageBuilding || st == gradiotest.StageAppStarting {
			waking++
		}
	}
	need := (waiting+p.Capacity-1)/p.Capacity - waking
	for _, r := range tg.reps {
		st := hub.Stage(r.id)
		switch {
		case st == gradiotest.StagePaused && need > 0:
			if _, err := hc.Restart(ctx, r.id); err == nil {
				need--
			}
		case st == gradiotest.StageRunning && len(r.inflight) == 0 && now.Sub(r.lastCall) >= pol.ReactiveIdle && waiting == 0:
			if _, err := hc.Pause(ctx, r.id); err == nil {
				r.lastCall = now
			}
		}
	}
}
