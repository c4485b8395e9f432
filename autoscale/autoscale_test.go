package autoscale_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/autoscale"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeTarget is a pool seen from the controller.
type fakeTarget struct {
	mu      sync.Mutex
	loads   map[string]autoscale.Load
	waiting int
	parked  map[string]bool
	calls   []string
}

func newTarget(names ...string) *fakeTarget {
	t := &fakeTarget{loads: map[string]autoscale.Load{}, parked: map[string]bool{}}
	for _, n := range names {
		t.loads[n] = autoscale.Load{Capacity: 4}
	}
	return t
}

func (t *fakeTarget) Load(r string) autoscale.Load {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.loads[r]
}

func (t *fakeTarget) Waiting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waiting
}

func (t *fakeTarget) SetParked(r string, p bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.parked[r] = p
	t.calls = append(t.calls, fmt.Sprintf("%s=%v", r, p))
}

func (t *fakeTarget) set(r string, inUse, waiting int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.loads[r]
	l.InUse, l.Waiting = inUse, waiting
	t.loads[r] = l
}

func (t *fakeTarget) setWaiting(n int) {
	t.mu.Lock()
	t.waiting = n
	t.mu.Unlock()
}

func (t *fakeTarget) isParked(r string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.parked[r]
}

const ownerTok = "hf_owner"

type rig struct {
	clk    *fakeClock
	hub    *gradiotest.Hub
	target *fakeTarget
	ctl    *autoscale.Controller
	client *autoscale.HubClient
	names  []string
}

// newRig: three replicas on an emulated Hub (build 30 s, start 60 s) on a
// fake clock, driven by a controller with cfg.
func newRig(t *testing.T, cfg autoscale.Config, token string) *rig {
	t.Helper()
	clk, hub, reps, names := threeSpaces(t)
	target := newTarget(names...)
	client := autoscale.NewHubClient(hub.URL, token, 0, nil, clk.Now)
	if cfg.Mode == "" {
		cfg.Mode = autoscale.ModeOn
	}
	ctl := autoscale.New(cfg, client, target, reps, nil, clk.Now)
	return &rig{clk: clk, hub: hub, target: target, ctl: ctl, client: client, names: names}
}

// threeSpaces: the replicas r1-r3 on the l4x1 Spaces o/r1-o/r3 of an
// emulated Hub (build 30 s, start 60 s, owner token ownerTok) on a fake
// clock from a Monday.
func threeSpaces(t *testing.T) (*fakeClock, *gradiotest.Hub, []autoscale.Replica, []string) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)}
	hub := gradiotest.NewHub()
	t.Cleanup(hub.Close)
	hub.SetClock(clk.Now)
	hub.SetStartTimes(30*time.Second, 60*time.Second)
	hub.SetOwnerToken(ownerTok)
	var reps []autoscale.Replica
	var names []string
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("o/r%d", i)
		hub.AddSpaceURL(id, "http://127.0.0.1:1")
		hub.SetHardware(id, "l4x1")
		reps = append(reps, autoscale.Replica{Name: fmt.Sprintf("r%d", i), Space: id})
		names = append(names, fmt.Sprintf("r%d", i))
	}
	return clk, hub, reps, names
}

// run ticks every step for d.
func (r *rig) run(d, step time.Duration) {
	for end := r.clk.Now().Add(d); r.clk.Now().Before(end); {
		r.ctl.Tick(context.Background())
		r.clk.Add(step)
	}
	r.ctl.Tick(context.Background())
}

func (r *rig) stages() []string {
	var out []string
	for i := 1; i <= 3; i++ {
		out = append(out, r.hub.Stage(fmt.Sprintf("o/r%d", i)))
	}
	return out
}

func count(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

func TestParksAfterParkAfterKeepsMinAwake(t *testing.T) {
	r := newRig(t, autoscale.Config{}, ownerTok)
	r.run(14*time.Minute, 5*time.Second)
	if st := r.stages(); count(st, "RUNNING") != 3 {
		t.Fatalf("parked before park_after: %v", st)
	}
	r.run(2*time.Minute, 5*time.Second)
	st := r.stages()
	if count(st, "RUNNING") != 1 || count(st, "PAUSED") != 2 {
		t.Fatalf("after park_after: %v, want 1 RUNNING (min_awake) and 2 PAUSED", st)
	}
	for i, s := range st {
		if (s == "PAUSED") != r.target.isParked(r.names[i]) {
			t.Errorf("%s is %s but parked in the pool = %v", r.names[i], s, r.target.isParked(r.names[i]))
		}
	}
	// Hours later: nothing flaps.
	r.run(3*time.Hour, 30*time.Second)
	if st2 := r.stages(); count(st2, "PAUSED") != 2 {
		t.Fatalf("later: %v", st2)
	}
	if n := len(r.hub.Transitions("o/r2")) + len(r.hub.Transitions("o/r3")); n != 2 {
		t.Errorf("%d transitions, want the 2 pauses", n)
	}
}

func TestMinAwakeZeroScalesToZero(t *testing.T) {
	zero := 0
	r := newRig(t, autoscale.Config{MinAwake: &zero}, ownerTok)
	r.run(20*time.Minute, 10*time.Second)
	if st := r.stages(); count(st, "PAUSED") != 3 {
		t.Fatalf("min_awake 0: %v", st)
	}
}

func TestDrainWaitsForCallsInFlight(t *testing.T) {
	r := newRig(t, autoscale.Config{}, ownerTok)
	r.target.set("r1", 1, 0) // r1 busy: kept
	r.target.set("r3", 1, 0) // a call in flight on r3 ...
	r.run(16*time.Minute, 5*time.Second)
	// need = 1 (demand 2, capacity 4*0.8): r1 or r3 is kept, the other drains
	if st := r.stages(); count(st, "PAUSED") != 1 {
		t.Fatalf("stages %v", st)
	}
	drained := ""
	for _, n := range []string{"r1", "r3"} {
		if r.target.isParked(n) {
			drained = n
		}
	}
	if drained == "" {
		t.Fatalf("neither busy replica drains: %v", r.target.calls)
	}
	id := "o/" + drained
	if got := r.hub.Stage(id); got != "RUNNING" {
		t.Fatalf("%s paused with a call in flight: %s", drained, got)
	}
	r.target.set(drained, 0, 0) // ... finishes
	r.run(10*time.Second, 5*time.Second)
	if got := r.hub.Stage(id); got != "PAUSED" {
		t.Fatalf("%s not paused once drained: %s", drained, got)
	}
}

func TestWakesAtOnceWhenCallersWait(t *testing.T) {
	zero := 0
	r := newRig(t, autoscale.Config{MinAwake: &zero}, ownerTok)
	r.run(20*time.Minute, 10*time.Second)
	if st := r.stages(); count(st, "PAUSED") != 3 {
		t.Fatalf("setup: %v", st)
	}
	r.target.setWaiting(2)
	r.run(0, 0)
	st := r.stages()
	if count(st, "BUILDING") != 1 {
		t.Fatalf("callers wait: %v, want one replica woken", st)
	}
	woke := r.names[0]
	for i, s := range st {
		if s == "BUILDING" {
			woke = r.names[i]
		}
	}
	if !r.target.isParked(woke) {
		t.Fatalf("%s takes calls before it runs", woke)
	}
	r.run(95*time.Second, 5*time.Second)
	if r.target.isParked(woke) {
		t.Fatalf("%s still parked in the pool once RUNNING (%v)", woke, r.stages())
	}
	var s autoscale.ReplicaStatus
	for _, rs := range r.ctl.Status().Replicas {
		if rs.Name == woke {
			s = rs
		}
	}
	// 30 s build + 60 s start, read on 5 s ticks
	if !s.WakeMeasured || s.WakeSeconds < 90 || s.WakeSeconds > 95 {
		t.Errorf("measured wake %+v", s)
	}
}

func TestParkAfterIsAtLeastThreeWakeTimes(t *testing.T) {
	r := newRig(t, autoscale.Config{MinAwakeAfterWake: time.Minute}, ownerTok)
	r.hub.SetStartTimes(2*time.Minute, 8*time.Minute) // a 10 min wake
	r.run(16*time.Minute, 10*time.Second)             // r2, r3 parked (estimate 2 min: 15 min rule)
	r.target.setWaiting(10)
	r.run(11*time.Minute, 10*time.Second)
	r.target.setWaiting(0)
	st := r.stages()
	if count(st, "RUNNING") != 3 {
		t.Fatalf("not all woken: %v", st)
	}
	r.run(29*time.Minute, 10*time.Second)
	if st := r.stages(); count(st, "RUNNING") != 3 {
		t.Fatalf("parked before 3x the 10 min wake time: %v", st)
	}
	// the moving average of the demand keeps one of them needed a few
	// minutes longer; both go within 15 minutes more
	r.run(15*time.Minute, 10*time.Second)
	if st := r.stages(); count(st, "PAUSED") != 2 {
		t.Fatalf("not parked after 3x wake time: %v\n%+v", st, r.ctl.Status())
	}
}

func TestFlapBudgetIsNeverExceeded(t *testing.T) {
	zero := 0
	cfg := autoscale.Config{MinAwake: &zero, ParkAfter: time.Second, MinAwakeAfterWake: time.Second,
		WakeEstimate: time.Millisecond, MaxActionsPerHour: 3, MaxActionsPerDay: 5}
	r := newRig(t, cfg, ownerTok)
	r.hub.SetStartTimes(0, 5*time.Second)
	// demand every other minute: a policy without a budget would flap
	for i := range 6 * 360 {
		r.target.setWaiting((i / 6) % 2 * 8)
		r.run(0, 0)
		r.clk.Add(10 * time.Second)
	}
	most := 0
	for i := 1; i <= 3; i++ {
		tr := r.hub.Transitions(fmt.Sprintf("o/r%d", i))
		var acts []time.Time
		for _, x := range tr {
			if x.Stage == "PAUSED" || x.Stage == "BUILDING" {
				acts = append(acts, x.At)
			}
		}
		if len(acts) > 5 {
			t.Errorf("r%d: %d actions in 6 hours, budget 5 a day", i, len(acts))
		}
		for j := range acts {
			n := 0
			for k := j; k < len(acts) && acts[k].Sub(acts[j]) < time.Hour; k++ {
				n++
			}
			if n > 3 {
				t.Errorf("r%d: %d actions within an hour from %v, budget 3", i, n, acts[j])
			}
		}
		most = max(most, len(acts))
	}
	// a park keeps one action of the budget for the wake after it, so 4
	// of the 5 is as far as parks and wakes go
	if most < 4 {
		t.Errorf("at most %d actions per replica: the test did not reach the day budget", most)
	}
	if c := r.ctl.Counts(); c[[2]string{"wake", "blocked"}]+c[[2]string{"drain", "ok"}] == 0 {
		t.Errorf("counts %v", c)
	}
}

func TestForbiddenStopsManaging(t *testing.T) {
	r := newRig(t, autoscale.Config{}, "hf_not_the_owner")
	r.run(16*time.Minute, 5*time.Second)
	before := r.hub.Lookups("o/r2") + r.hub.Lookups("o/r3")
	r.run(2*time.Hour, 5*time.Second)
	after := r.hub.Lookups("o/r2") + r.hub.Lookups("o/r3")
	if after != before {
		t.Errorf("%d more Hub calls after the 403", after-before)
	}
	if st := r.stages(); count(st, "RUNNING") != 3 {
		t.Errorf("stages %v", st)
	}
	n := 0
	for _, rs := range r.ctl.Status().Replicas {
		if rs.State == "unmanaged" {
			n++
			if rs.Error == "" {
				t.Errorf("%s unmanaged without an error", rs.Name)
			}
		}
		if r.target.isParked(rs.Name) {
			t.Errorf("%s left parked in the pool after the 403", rs.Name)
		}
	}
	if n != 2 {
		t.Errorf("%d unmanaged, want the 2 it tried to park", n)
	}
}

func TestHubRateLimitHonoured(t *testing.T) {
	r := newRig(t, autoscale.Config{StatusEvery: time.Second}, ownerTok)
	r.hub.SetRateLimit(10)
	// status every tick for three replicas: 3 calls a tick, 10 allowed a window
	r.run(4*time.Minute, time.Second)
	total := 0
	for i := 1; i <= 3; i++ {
		total += r.hub.Lookups(fmt.Sprintf("o/r%d", i))
	}
	// one 429 is how the client learns the Hub's budget when its own is
	// larger; after it no call until the window ends
	if total > 11 {
		t.Errorf("%d Hub calls in one window with a budget of 10", total)
	}
	r.clk.Add(time.Minute)
	r.run(0, 0)
	total2 := 0
	for i := 1; i <= 3; i++ {
		total2 += r.hub.Lookups(fmt.Sprintf("o/r%d", i))
	}
	if total2 == total {
		t.Errorf("no call in the next window")
	}
}

func TestOwnBudgetBoundsCalls(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)}
	hub := gradiotest.NewHub()
	defer hub.Close()
	hub.SetClock(clk.Now)
	hub.AddSpaceURL("o/a", "http://127.0.0.1:1")
	c := autoscale.NewHubClient(hub.URL, ownerTok, 4, nil, clk.Now)
	var errs int
	for range 10 {
		if _, err := c.Runtime(context.Background(), "o/a"); err != nil {
			errs++
		}
	}
	if hub.Lookups("o/a") != 4 || errs != 6 {
		t.Fatalf("%d calls made, %d refused; budget 4", hub.Lookups("o/a"), errs)
	}
	clk.Add(autoscale.HubWindow)
	if _, err := c.Runtime(context.Background(), "o/a"); err != nil {
		t.Fatalf("next window: %v", err)
	}
	if w := c.CallsLastWindows(); len(w) != 1 || w[0] != 4 {
		t.Errorf("per window %v", w)
	}
	if _, err := c.Runtime(context.Background(), "no-slash"); err == nil {
		t.Error("a bad Space id was sent")
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	r := newRig(t, autoscale.Config{Mode: autoscale.ModeDryRun}, ownerTok)
	r.run(20*time.Minute, 5*time.Second)
	if st := r.stages(); count(st, "RUNNING") != 3 {
		t.Fatalf("dry run changed stages: %v", st)
	}
	if len(r.target.calls) != 0 {
		t.Fatalf("dry run parked in the pool: %v", r.target.calls)
	}
	s := r.ctl.Status()
	parked, saved := 0, 0.0
	for _, rs := range s.Replicas {
		if rs.State == "parked" {
			parked++
		}
		saved += rs.SavedGPUHours
	}
	if parked != 2 || saved <= 0 {
		t.Fatalf("dry run status: %+v", s.Replicas)
	}
	for _, a := range s.Actions {
		if a.Result != autoscale.ResultDryRun {
			t.Errorf("action %+v", a)
		}
	}
	// and would wake for waiting callers
	r.target.setWaiting(10)
	r.run(0, 0)
	if c := r.ctl.Counts(); c[[2]string{"wake", "dry_run"}] == 0 {
		t.Errorf("counts %v", c)
	}
}

func TestHolds(t *testing.T) {
	r := newRig(t, autoscale.Config{}, ownerTok)
	if err := r.ctl.SetHold("r2", autoscale.HoldAwake, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := r.ctl.SetHold("r1", autoscale.HoldParked, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	r.run(20*time.Minute, 10*time.Second)
	st := r.stages()
	if st[0] != "PAUSED" || st[1] != "RUNNING" {
		t.Fatalf("holds: %v", st)
	}
	r.target.setWaiting(20) // demand for all three: r1 stays held parked
	r.run(5*time.Minute, 10*time.Second)
	if got := r.hub.Stage("o/r1"); got != "PAUSED" {
		t.Fatalf("held parked replica woke: %s", got)
	}
	r.run(10*time.Minute, 10*time.Second) // hold over: r1 wakes
	if got := r.hub.Stage("o/r1"); got != "RUNNING" {
		t.Fatalf("after the hold: %s", got)
	}
	for _, bad := range []struct {
		name string
		h    autoscale.Hold
		d    time.Duration
	}{{"r1", "sideways", time.Hour}, {"r1", autoscale.HoldAwake, 0}, {"nope", autoscale.HoldAwake, time.Hour}} {
		if err := r.ctl.SetHold(bad.name, bad.h, bad.d); err == nil {
			t.Errorf("SetHold%v accepted", bad)
		}
	}
}

func TestForecastWakesAheadOfDailyPeak(t *testing.T) {
	zero := 0
	r := newRig(t, autoscale.Config{MinAwake: &zero}, ownerTok)
	step := 30 * time.Second
	// day 1: 8 calls in use from 09:00 to 17:00 on r1, nothing else
	simDay := func() (firstWake time.Time) {
		day := r.clk.Now().Truncate(24 * time.Hour)
		for r.clk.Now().Before(day.Add(24 * time.Hour)) {
			h := r.clk.Now().Sub(day)
			busy := h >= 9*time.Hour && h < 17*time.Hour
			if busy {
				r.target.setWaiting(0)
				r.target.set("r1", 3, 0)
				r.target.set("r2", 3, 0)
				r.target.set("r3", 2, 0)
			} else {
				r.target.set("r1", 0, 0)
				r.target.set("r2", 0, 0)
				r.target.set("r3", 0, 0)
			}
			r.ctl.Tick(context.Background())
			if firstWake.IsZero() {
				for _, a := range r.ctl.Status().Actions {
					if a.Kind == "wake" && a.Result == "ok" && a.At.After(day.Add(6*time.Hour)) {
						firstWake = a.At
					}
				}
			}
			r.clk.Add(step)
		}
		return firstWake
	}
	simDay()
	day2 := r.clk.Now().Truncate(24 * time.Hour)
	w := simDay()
	nine := day2.Add(9 * time.Hour)
	if w.IsZero() || !w.Before(nine) || w.Before(nine.Add(-30*time.Minute)) {
		t.Fatalf("day 2 first wake at %v, want shortly before %v", w, nine)
	}
}

// TestBudgetNeverStrandsAParkedReplica: with the day budget nearly spent,
// the policy stops parking rather than park a replica it could not wake.
func TestBudgetNeverStrandsAParkedReplica(t *testing.T) {
	cfg := autoscale.Config{ParkAfter: time.Second, MinAwakeAfterWake: time.Second,
		WakeEstimate: time.Millisecond, MaxActionsPerHour: 1, MaxActionsPerDay: 1}
	r := newRig(t, cfg, ownerTok)
	r.hub.SetStartTimes(0, 5*time.Second)
	r.run(time.Minute, 5*time.Second)
	if st := r.stages(); count(st, "PAUSED") != 0 {
		// parking needs room for the wake after it: 2 > 1
		t.Fatalf("parked with no budget left for the wake: %v", st)
	}
	cfg.MaxActionsPerDay, cfg.MaxActionsPerHour = 2, 2
	r = newRig(t, cfg, ownerTok)
	r.hub.SetStartTimes(0, 5*time.Second)
	r.run(time.Minute, 5*time.Second)
	if st := r.stages(); count(st, "PAUSED") != 2 {
		t.Fatalf("stages %v", st)
	}
	r.target.setWaiting(10) // demand: both must be woken, 1 action left each
	r.run(30*time.Second, 5*time.Second)
	if st := r.stages(); count(st, "RUNNING") != 3 {
		t.Fatalf("stranded: %v", st)
	}
}

// TestWakesForCallersQueuedOnAReplica: callers queued for a session on the
// one awake replica (not waiting for the pool as a whole) are urgent too
// once their queue lasts.
func TestWakesForCallersQueuedOnAReplica(t *testing.T) {
	r := newRig(t, autoscale.Config{}, ownerTok)
	r.run(16*time.Minute, 10*time.Second)
	if st := r.stages(); count(st, "PAUSED") != 2 {
		t.Fatalf("setup: %v", st)
	}
	r.target.set("r1", 4, 3) // full, 3 waiting there
	r.run(40*time.Second, 5*time.Second)
	if st := r.stages(); count(st, "PAUSED") != 1 {
		t.Fatalf("a lasting queue on r1 woke %v, want one more replica", st)
	}
}

// wakingTarget visits a replica's Space when the policy wakes it (the
// pool's Wake).
type wakingTarget struct {
	*fakeTarget
	hub *gradiotest.Hub
}

func (t wakingTarget) Wake(r string) { t.hub.Visit("o/" + r) }

// TestSleepLever: with park_lever sleep a replica not needed is parked in
// the pool at once and its Space gets a short sleep time instead of a
// pause: it stops by itself, is never paused, and callers waiting wake it
// by a visit (APP_STARTING, no BUILDING), its sleep time set back to
// never; a replica needed again before its Space stopped is back at once,
// without a wake.
func TestSleepLever(t *testing.T) {
	r := newRig(t, autoscale.Config{}, ownerTok)
	wt := wakingTarget{fakeTarget: r.target, hub: r.hub}
	ctl := autoscale.New(autoscale.Config{Mode: autoscale.ModeOn, Lever: autoscale.LeverSleep, SleepTime: 2 * time.Minute},
		r.client, wt, []autoscale.Replica{{Name: "r1", Space: "o/r1"}, {Name: "r2", Space: "o/r2"}, {Name: "r3", Space: "o/r3"}}, nil, r.clk.Now)
	r.ctl = ctl
	r.run(16*time.Minute, 5*time.Second)
	st := r.stages()
	if count(st, "STOPPED") != 2 || count(st, "RUNNING") != 1 {
		t.Fatalf("after park_after: %v, want 2 STOPPED (their sleep time) and 1 RUNNING", st)
	}
	var slept []string
	for i, s := range st {
		if s == "STOPPED" {
			slept = append(slept, r.names[i])
			if !r.target.isParked(r.names[i]) {
				t.Errorf("%s stopped but not parked in the pool", r.names[i])
			}
		}
	}
	r.target.setWaiting(6) // urgent: both are woken
	r.run(70*time.Second, 5*time.Second)
	for _, n := range slept {
		var got []string
		for _, x := range r.hub.Transitions("o/" + n) {
			got = append(got, x.Stage)
		}
		if strings.Join(got, " ") != "STOPPED APP_STARTING RUNNING" {
			t.Errorf("%s went %v, want STOPPED APP_STARTING RUNNING (a visit, no pause, no build)", n, got)
		}
		if r.target.isParked(n) {
			t.Errorf("%s runs but stays parked", n)
		}
	}
	r.target.setWaiting(0)

	// A sleep time longer than the quiet spell: the replica is parked in
	// the pool, its Space still runs, and it is back at once when needed.
	r2 := newRig(t, autoscale.Config{}, ownerTok)
	r2.ctl = autoscale.New(autoscale.Config{Mode: autoscale.ModeOn, Lever: autoscale.LeverSleep, SleepTime: 2 * time.Hour},
		r2.client, r2.target, []autoscale.Replica{{Name: "r1", Space: "o/r1"}, {Name: "r2", Space: "o/r2"}, {Name: "r3", Space: "o/r3"}}, nil, r2.clk.Now)
	r2.run(16*time.Minute, 5*time.Second)
	parked := 0
	for _, n := range r2.names {
		if r2.target.isParked(n) {
			parked++
		}
	}
	if st := r2.stages(); count(st, "RUNNING") != 3 || parked != 2 {
		t.Fatalf("long sleep time: %v, %d parked; want 3 RUNNING, 2 parked", st, parked)
	}
	r2.target.setWaiting(6)
	r2.run(0, 0)
	for _, n := range r2.names {
		if r2.target.isParked(n) {
			t.Errorf("%s still parked one tick after callers came", n)
		}
		if tr := r2.hub.Transitions("o/" + n); len(tr) != 0 {
			t.Errorf("%s changed stage: %v", n, tr)
		}
	}
	for _, rs := range r2.ctl.Status().Replicas {
		if rs.ActionsHour > 2 {
			t.Errorf("%s: %d actions", rs.Name, rs.ActionsHour)
		}
	}
}

// wokenForQueue parks r2 and r3 at the defaults, then fills r1 with a
// lasting queue so that one of them is woken, and returns its Space id.
func wokenForQueue(t *testing.T, r *rig) string {
	t.Helper()
	r.run(16*time.Minute, 10*time.Second)
	if st := r.stages(); count(st, "PAUSED") != 2 {
		t.Fatalf("setup: %v", st)
	}
	r.target.set("r1", 4, 3) // full, 3 waiting there: one more replica
	r.run(40*time.Second, 5*time.Second)
	for i, s := range r.stages() {
		if s == "BUILDING" {
			return "o/" + r.names[i]
		}
	}
	t.Fatalf("nothing woken for the queue: %v", r.stages())
	return ""
}

// TestWakeThatHangsWakesAnother: a Space whose wake never finishes (stuck
// in BUILDING) must not strand the callers waiting for it while another
// replica sleeps: past twice its expected wake time it stops counting as
// capacity on its way, and another replica is woken.
func TestWakeThatHangsWakesAnother(t *testing.T) {
	r := newRig(t, autoscale.Config{}, ownerTok) // the defaults: a 2 min wake expected
	stuck := wokenForQueue(t, r)
	r.hub.SetStage(stuck, "BUILDING") // the Hub's runtime machine lets go: it stays there
	r.run(3*time.Minute, 5*time.Second)
	if st := r.stages(); count(st, "PAUSED") != 1 {
		t.Fatalf("another replica woken before the wake was overdue: %v", st)
	}
	r.run(3*time.Minute, 5*time.Second) // overdue at 4 min, then a 90 s wake
	st := r.stages()
	if count(st, "PAUSED") != 0 || count(st, "RUNNING") != 2 {
		t.Fatalf("6 min into a stuck wake: %v, want the third replica woken and running", st)
	}
	for i, s := range st {
		if s == "RUNNING" && r.target.isParked(r.names[i]) {
			t.Errorf("%s runs but the pool was not given it", r.names[i])
		}
	}
	for _, rs := range r.ctl.Status().Replicas {
		if rs.Space == stuck && !strings.Contains(rs.Why, "overdue") {
			t.Errorf("the stuck replica's status does not say its wake is overdue: %+v", rs)
		}
	}
}

// TestWakeThatFailsGoesBackToThePool: a woken Space that errors instead of
// running is a failure, not a parked replica: the pool gets it back (its
// health checks judge it, eject it and alert), the wake is logged failed
// with the stage, and another replica is woken for the callers.
func TestWakeThatFailsGoesBackToThePool(t *testing.T) {
	r := newRig(t, autoscale.Config{}, ownerTok)
	failed := wokenForQueue(t, r)
	r.hub.SetStage(failed, "RUNTIME_ERROR")
	r.run(2*time.Minute, 5*time.Second)
	name := strings.TrimPrefix(failed, "o/")
	if r.target.isParked(name) {
		t.Errorf("%s is in RUNTIME_ERROR and still parked in the pool: no health check sees it", name)
	}
	if st := r.stages(); count(st, "RUNNING") != 2 {
		t.Errorf("stages %v: want another replica woken and running", st)
	}
	var logged bool
	for _, a := range r.ctl.Status().Actions {
		if a.Replica == name && a.Kind == autoscale.ActionWake && a.Result == autoscale.ResultFailed && strings.Contains(a.Reason, "RUNTIME_ERROR") {
			logged = true
		}
	}
	if !logged {
		t.Errorf("no failed wake of %s logged: %+v", name, r.ctl.Status().Actions)
	}
}

// freezer is a Hub in front of another that, while frozen, takes requests
// and answers none until the caller gives up.
type freezer struct {
	frozen  atomic.Bool
	blocked chan struct{} // a request is held
	next    http.Handler
}

func (f *freezer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if f.frozen.Load() {
		select {
		case f.blocked <- struct{}{}:
		default:
		}
		<-req.Context().Done()
		return
	}
	f.next.ServeHTTP(w, req)
}

// TestFrozenHub: the Hub stops answering. The policy's status and holds
// are still answered while a tick waits on it, a tick whose ctx ends (the
// gateway closes) returns, and once the Hub answers again the wake the
// callers wait for is made at the next tick.
func TestFrozenHub(t *testing.T) {
	r := newRig(t, autoscale.Config{}, ownerTok)
	target, err := url.Parse(r.hub.URL)
	if err != nil {
		t.Fatal(err)
	}
	fr := &freezer{blocked: make(chan struct{}, 1), next: httputil.NewSingleHostReverseProxy(target)}
	front := httptest.NewServer(fr)
	defer front.Close()
	var reps []autoscale.Replica
	for _, n := range r.names {
		reps = append(reps, autoscale.Replica{Name: n, Space: "o/" + n})
	}
	client := autoscale.NewHubClient(front.URL, ownerTok, 0, &http.Client{}, r.clk.Now) // no time-out: only ctx ends a call
	r.ctl = autoscale.New(autoscale.Config{Mode: autoscale.ModeOn}, client, r.target, reps, nil, r.clk.Now)
	r.run(16*time.Minute, 10*time.Second)
	if st := r.stages(); count(st, "PAUSED") != 2 {
		t.Fatalf("setup: %v", st)
	}
	before := r.ctl.Status()

	fr.frozen.Store(true)
	r.target.set("r1", 4, 6) // callers queue: a wake is due
	r.clk.Add(time.Minute)   // every Space's stage is due a read
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tickDone := make(chan struct{})
	go func() { r.ctl.Tick(ctx); close(tickDone) }()
	<-fr.blocked
	statusDone := make(chan autoscale.Status, 1)
	go func() {
		if err := r.ctl.SetHold("r3", autoscale.HoldAuto, 0); err != nil {
			t.Error(err)
		}
		statusDone <- r.ctl.Status()
	}()
	select {
	case st := <-statusDone:
		if len(st.Replicas) != len(before.Replicas) {
			t.Errorf("status during the freeze: %+v", st)
		}
	case <-tickDone:
		t.Fatal("the tick ended while the Hub is frozen")
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the status and holds waited for a tick blocked on the frozen Hub")
	}
	cancel()
	select {
	case <-tickDone:
	case <-time.After(30 * time.Second):
		t.Fatal("a tick waiting on a frozen Hub did not return once its ctx ended")
	}
	if st := r.stages(); count(st, "PAUSED") != 2 {
		t.Fatalf("stages changed through a frozen Hub: %v", st)
	}
	if a := r.ctl.Status().Actions; len(a) != len(before.Actions) {
		t.Errorf("a tick cut short by the gateway's close recorded %+v", a[len(before.Actions):])
	}

	fr.frozen.Store(false)
	r.run(5*time.Second, 5*time.Second)
	if st := r.stages(); count(st, "BUILDING") != 2 {
		t.Fatalf("after the Hub came back: %v, want both parked replicas woken for the 6 callers", st)
	}
}

// TestRestartedGatewayTakesBackItsSleepTimes: with park_lever sleep the
// Hub keeps the sleep time the policy set; a gateway that restarted (its
// policy's memory gone, no cluster to read it from) takes a Space whose
// sleep time is its own as parked by it, so that one it needs awake gets
// its sleep time back to never, instead of stopping again whenever idle.
func TestRestartedGatewayTakesBackItsSleepTimes(t *testing.T) {
	r := newRig(t, autoscale.Config{}, ownerTok)
	reps := []autoscale.Replica{{Name: "r1", Space: "o/r1"}, {Name: "r2", Space: "o/r2"}, {Name: "r3", Space: "o/r3"}}
	cfg := autoscale.Config{Mode: autoscale.ModeOn, Lever: autoscale.LeverSleep, SleepTime: 2 * time.Minute}
	r.ctl = autoscale.New(cfg, r.client, wakingTarget{fakeTarget: r.target, hub: r.hub}, reps, nil, r.clk.Now)
	r.run(16*time.Minute, 5*time.Second)
	if st := r.stages(); count(st, "STOPPED") != 2 {
		t.Fatalf("setup: %v, want 2 STOPPED by their sleep time", st)
	}
	// The gateway restarts, now told to keep every replica awake; its
	// pool is new (nothing parked) and nobody calls the app.
	three := 3
	cfg.MinAwake = &three
	r.target = newTarget(r.names...)
	r.ctl = autoscale.New(cfg, r.client, wakingTarget{fakeTarget: r.target, hub: r.hub}, reps, nil, r.clk.Now)
	mark := map[string]int{}
	for _, n := range r.names {
		mark[n] = len(r.hub.Transitions("o/" + n))
	}
	r.run(30*time.Minute, 5*time.Second)
	if st := r.stages(); count(st, "RUNNING") != 3 {
		t.Fatalf("30 min after the restart: %v, want 3 RUNNING", st)
	}
	for _, n := range r.names {
		rt, err := r.client.Runtime(context.Background(), "o/"+n)
		if err != nil {
			t.Fatal(err)
		}
		if rt.GCTimeout != nil {
			t.Errorf("%s kept a sleep time of %d s while needed awake", n, *rt.GCTimeout)
		}
		var stages []string
		for _, x := range r.hub.Transitions("o/" + n)[mark[n]:] {
			stages = append(stages, x.Stage)
		}
		if n != "r1" && strings.Join(stages, " ") != "APP_STARTING RUNNING" {
			t.Errorf("%s went %v after the restart, want one wake (APP_STARTING RUNNING)", n, stages)
		}
	}
}
