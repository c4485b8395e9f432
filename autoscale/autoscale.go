// Package autoscale parks the Hugging Face Spaces behind a pool's replicas
// when they are not needed and wakes them ahead of demand (issue 34).
//
// Each Tick the Controller reads every replica's demand (calls in use plus
// waiting), its capacity and the pool's waiting callers from a Target, and
// the Space's stage from the Hub. It keeps enough replicas awake for the
// larger of today's demand and a forecast at the wake lead time
// (Forecaster), never fewer than MinAwake, and parks the rest: a replica
// unneeded for ParkAfter (and at least 3x its measured wake time) is first
// drained (Target.SetParked: no new calls there, calls in flight finish),
// then paused. It wakes parked replicas (Hub restart, never a factory
// reboot) ahead of the forecast, and at once when callers wait. Guard
// rails: a minimum awake time after a wake, a flap budget per replica per
// hour and per day, the Hub call budget and 429, and a 403/401 stops
// managing that Space with an error.
//
// In ModeDryRun it decides the same way but acts only in its log and
// status: no Hub write, no SetParked.
package autoscale

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

// Mode is autoscale.mode.
type Mode string

// urgentTicks is how many ticks in a row callers must wait (while some
// replica is awake and they do not outnumber its slots) before a replica
// is woken for them: 6 ticks of 5 s, half a minute.
const urgentTicks = 6

// visitGrace is how long a visited stopped Space may still be reported
// STOPPED before the policy takes the visit for lost.
const visitGrace = 30 * time.Second

// Modes.
const (
	ModeOff    Mode = "off"
	ModeDryRun Mode = "dry_run"
	ModeOn     Mode = "on"
)

// ParseMode parses autoscale.mode.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModeOff, ModeDryRun, ModeOn:
		return Mode(s), nil
	case "":
		return ModeOff, nil
	}
	return "", fmt.Errorf("autoscale.mode %q: want off, dry_run or on", s)
}

// Config are the policy's knobs. Zero values take the defaults named.
type Config struct {
	Mode Mode
	// MinAwake replicas are always kept awake (default 1; 0 allows
	// scaling to zero).
	MinAwake *int
	// ParkAfter is how long a replica must be unneeded before it is
	// parked (default 15 min); never less than 3x its wake time.
	ParkAfter time.Duration
	// MinAwakeAfterWake keeps a woken replica awake at least this long
	// (default 10 min).
	MinAwakeAfterWake time.Duration
	// MaxActionsPerHour and MaxActionsPerDay bound the actions (parks and
	// wakes) per replica (defaults 4 and 24).
	MaxActionsPerHour int
	MaxActionsPerDay  int
	// WakeEstimate is the wake time assumed until one is measured
	// (default 2 min).
	WakeEstimate time.Duration
	// DrainTimeout pauses a draining replica even if calls are still in
	// flight after this long (default 10 min).
	DrainTimeout time.Duration
	// StatusEvery is how often a settled Space's stage is read from the
	// Hub (default 1 min; a Space in transition is read every tick).
	StatusEvery time.Duration
	// Utilization is the share of a replica's capacity the forecast may
	// fill before another replica is woken (default 0.8).
	Utilization float64
	// PricePerHour of one replica, for the estimated cost (default 0.80,
	// an l4x1).
	PricePerHour float64
	// Lever is how a drained replica is parked: LeverPause (the default)
	// pauses its Space; LeverSleep sets a short sleep time (SleepTime)
	// instead: the Space stops itself once idle that long, and a replica
	// needed again before it stopped is back at once, one stopped wakes
	// on a visit (Waker) without a build. Either way it is parked in the
	// pool at once.
	Lever Lever
	// SleepTime is the sleep time LeverSleep sets (default 1 min).
	SleepTime time.Duration
}

// Lever is how the policy parks a replica's Space.
type Lever string

// Levers.
const (
	LeverPause Lever = "pause"
	LeverSleep Lever = "sleep"
)

// ParseLever parses autoscale.park_lever ("" is LeverPause).
func ParseLever(s string) (Lever, error) {
	switch Lever(s) {
	case "", LeverPause:
		return LeverPause, nil
	case LeverSleep:
		return LeverSleep, nil
	}
	return "", fmt.Errorf("autoscale.park_lever %q: want pause or sleep", s)
}

func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeOff
	}
	if c.MinAwake == nil {
		one := 1
		c.MinAwake = &one
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ParkAfter, 15*time.Minute)
	def(&c.MinAwakeAfterWake, 10*time.Minute)
	def(&c.WakeEstimate, 2*time.Minute)
	def(&c.DrainTimeout, 10*time.Minute)
	def(&c.StatusEvery, time.Minute)
	if c.MaxActionsPerHour <= 0 {
		c.MaxActionsPerHour = 4
	}
	if c.MaxActionsPerDay <= 0 {
		c.MaxActionsPerDay = 24
	}
	if c.Utilization <= 0 || c.Utilization > 1 {
		c.Utilization = 0.8
	}
	if c.PricePerHour <= 0 {
		c.PricePerHour = 0.80
	}
	if c.Lever == "" {
		c.Lever = LeverPause
	}
	def(&c.SleepTime, time.Minute)
	return c
}

// Load is one replica's demand as the pool sees it.
type Load struct {
	InUse    int // calls running there
	Waiting  int // callers waiting for a session there
	Capacity int // calls it can run at once (<= 0: 1)
}

// Target is the pool the controller steers.
type Target interface {
	// Load reports a replica's demand.
	Load(replica string) Load
	// Waiting reports callers waiting for the pool that no replica's
	// Load counts (e.g. none awake to queue on).
	Waiting() int
	// SetParked marks a replica parked (true): no new calls or users go
	// there, calls in flight finish, no probes, no ejection; false ends it.
	SetParked(replica string, parked bool)
}

// ETASetter is an optional part of a Target: it is told when the first
// replica being woken is expected to run (zero: none is waking), for
// callers waiting for it.
type ETASetter interface {
	SetWakeETA(at time.Time)
}

// Waker is an optional part of a Target: Wake visits a replica's Space
// (a request to its app), which wakes a STOPPED Space without a build;
// the policy wakes Spaces it put to sleep (LeverSleep) so.
type Waker interface {
	Wake(replica string)
}

// Hub is the part of HubClient the controller uses.
type Hub interface {
	Runtime(ctx context.Context, space string) (Runtime, error)
	Pause(ctx context.Context, space string) (Runtime, error)
	Restart(ctx context.Context, space string) (Runtime, error)
	SetSleepTime(ctx context.Context, space string, seconds int) (Runtime, error)
}

// Replica names a pool replica and its Space.
type Replica struct {
	Name  string
	Space string
}

// Hold is an operator's override of the policy for one replica.
type Hold string

// Holds.
const (
	HoldAuto   Hold = "auto"
	HoldAwake  Hold = "awake"
	HoldParked Hold = "parked"
)

// Action kinds and results, for logs and metrics.
const (
	ActionWake  = "wake"
	ActionPark  = "park"
	ActionDrain = "drain"

	ResultOK      = "ok"
	ResultDryRun  = "dry_run"
	ResultFailed  = "failed"
	ResultBlocked = "blocked" // flap budget or Hub budget
)

// Action is one decision.
type Action struct {
	At      time.Time `json:"at"`
	Replica string    `json:"replica"`
	Kind    string    `json:"kind"`
	Result  string    `json:"result"`
	Reason  string    `json:"reason"`
	Error   string    `json:"error,omitempty"`
}

type repState struct {
	Replica
	stage      string
	stageAt    time.Time // when the stage was last read
	known      bool
	lastNeeded time.Time
	awakeSince time.Time
	draining   bool
	drainSince time.Time
	parkedHere bool // parked by the policy (drained or paused)
	// sleepSet: the policy set its Space's sleep time (LeverSleep): it
	// stays parked, and stops by itself once idle that long.
	sleepSet bool
	// visited is when the policy visited its stopped Space to wake it:
	// the Hub may report it STOPPED a little longer (the visit is on its
	// way), which is not a reason to wake it again.
	visited time.Time
	// localParked is what this gateway's pool was told (Target.SetParked):
	// parkedHere, also when another gateway of a cluster decided it.
	localParked bool
	wakeSent    time.Time
	wakeTimes   []time.Duration
	actions     []time.Time // parks and wakes, last day
	disabled    error       // 403: no longer managed
	hold        Hold
	holdUntil   time.Time
	lastReason  string
	// dry run: would-be state
	dryParked  bool
	dryParkAt  time.Time
	drySaved   time.Duration
	awakeTotal time.Duration // billed-like time awake as observed
	lastTick   time.Time
}

// Controller is the policy. Create it with New; Tick drives it.
type Controller struct {
	cfg    Config
	hub    Hub
	target Target
	log    *slog.Logger
	now    func() time.Time

	// tickMu serializes Tick, which owns the fields up to actions (Hub
	// calls are made under it); mu guards the rest, read by Status,
	// Counts and SetHold without waiting for a Tick's Hub calls.
	tickMu   sync.Mutex
	reps     []*repState
	fc       *Forecaster
	demand   float64
	forecast float64
	lead     time.Duration // how far ahead forecast looks
	need     int
	// waitingTicks counts the ticks in a row with callers waiting.
	waitingTicks int
	actions      []Action // last 200
	// loads is this tick's demand per replica (over the cluster).
	loads map[string]Load
	// shared (a cluster) decides which gateway acts; token is the lease's
	// fencing token while this one does (0: another, leader, does);
	// unsaved are the actions not yet in the shared log.
	shared    Shared
	token     int64
	leader    string
	sharedErr bool
	unsaved   []Action

	mu      sync.Mutex
	counts  map[[2]string]uint64
	holds   map[string]pendingHold // set by SetHold, applied by the next Tick
	snap    Status
	hasSnap bool
}

type pendingHold struct {
	hold  Hold
	until time.Time
}

// New returns a Controller for replicas. now nil: time.Now; log nil: discard.
func New(cfg Config, hub Hub, target Target, replicas []Replica, log *slog.Logger, now func() time.Time) *Controller {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg.withDefaults(), hub: hub, target: target, log: log, now: now,
		fc: NewForecaster(0), counts: map[[2]string]uint64{}, holds: map[string]pendingHold{}}
	t := now()
	for _, r := range replicas {
		c.reps = append(c.reps, &repState{Replica: r, lastNeeded: t, awakeSince: t, hold: HoldAuto})
	}
	return c
}

// Run ticks every interval until ctx ends.
func (c *Controller) Run(ctx context.Context, interval time.Duration) {
	if c.cfg.Mode == ModeOff {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		c.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func awake(stage string) bool {
	switch stage {
	case StageRunning, StageRunBuild, StageRunStart:
		return true
	}
	return false
}

func waking(stage string) bool { return stage == StageBuilding || stage == StageStarting }

// overdue: r's wake has taken more than twice its expected time. Builds
// can hang; a wake that overdue is no longer counted as capacity on its
// way, so the callers waiting for it get another replica woken instead
// of waiting out their time-out beside a parked one.
func (c *Controller) overdue(r *repState, now time.Time) bool {
	return waking(r.stage) && !r.wakeSent.IsZero() && now.Sub(r.wakeSent) > 2*c.wakeTime(r)
}

func parkedStage(stage string) bool { return stage == StagePaused || stage == StageStopped }

// wakeTime is the replica's measured wake time (median of the last ones),
// else the estimate.
func (c *Controller) wakeTime(r *repState) time.Duration {
	if len(r.wakeTimes) == 0 {
		return c.cfg.WakeEstimate
	}
	s := append([]time.Duration(nil), r.wakeTimes...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func (c *Controller) parkAfter(r *repState) time.Duration {
	return max(c.cfg.ParkAfter, 3*c.wakeTime(r))
}

// budgetOK: n more actions keep the replica inside its flap budget. A
// park asks for 2 (itself and the wake that will follow), a wake for 1:
// the budget then never strands a parked replica that demand needs back.
func (c *Controller) budgetOK(r *repState, now time.Time, n int) bool {
	hour, day := 0, 0
	keep := r.actions[:0]
	for _, t := range r.actions {
		if now.Sub(t) < 24*time.Hour {
			keep = append(keep, t)
			day++
			if now.Sub(t) < time.Hour {
				hour++
			}
		}
	}
	r.actions = keep
	return hour+n <= c.cfg.MaxActionsPerHour && day+n <= c.cfg.MaxActionsPerDay
}

// Tick reads the state and acts once.
func (c *Controller) Tick(ctx context.Context) {
	if c.cfg.Mode == ModeOff {
		return
	}
	c.tickMu.Lock()
	defer c.tickMu.Unlock()
	now := c.now()
	c.mu.Lock()
	for _, r := range c.reps {
		if h, ok := c.holds[r.Name]; ok {
			r.hold, r.holdUntil = h.hold, h.until
		}
	}
	clear(c.holds)
	c.mu.Unlock()
	defer c.publish(now)
	defer c.publishETA(now)

	// This gateway's demand; in a cluster, every gateway's.
	c.loads = map[string]Load{}
	for _, r := range c.reps {
		c.loads[r.Name] = c.target.Load(r.Name)
	}
	poolWaiting := c.target.Waiting()
	if c.shared != nil {
		var ok bool
		if poolWaiting, ok = c.sync(ctx, now, poolWaiting); !ok {
			return // no Redis: nothing is decided (another gateway may act)
		}
	}
	if c.acting() {
		c.refresh(ctx, now)
	}
	if ctx.Err() != nil {
		return // the gateway closes: its Hub calls were cut, not failed
	}

	// Demand and capacity.
	// waiting: callers queued for the pool as a whole and for a session
	// on some replica alike.
	waiting := poolWaiting
	demand := float64(waiting)
	capacity := 1
	for _, r := range c.reps {
		l := c.loads[r.Name]
		demand += float64(l.InUse + l.Waiting)
		waiting += l.Waiting
		capacity = max(capacity, l.Capacity)
		if r.lastTick.After(time.Time{}) && c.effAwake(r) {
			r.awakeTotal += now.Sub(r.lastTick)
		}
		r.lastTick = now
	}
	lead := time.Duration(0)
	for _, r := range c.reps {
		lead = max(lead, c.wakeTime(r))
	}
	c.fc.Observe(now, demand)
	c.demand = demand
	c.lead = lead + c.cfg.StatusEvery
	c.forecast = c.fc.At(now, c.lead)
	per := math.Max(1, float64(capacity)*c.cfg.Utilization)
	// Need follows the smoothed demand and the forecast, not each tick's
	// count: a momentary queue at a busy moment must not wake a Space for
	// minutes. Callers waiting are urgent when nothing is awake, when they
	// outnumber the awake replicas' slots, or when the queue has lasted
	// urgentTicks ticks: then enough replicas for them are woken at once.
	need := int(math.Ceil(c.forecast / per))
	need = max(need, *c.cfg.MinAwake)
	// runningN: replicas taking calls now. The urgent need is counted
	// from them: replicas already waking count toward it, so a queue that
	// lasts through a wake does not wake one more replica every tick.
	runningN := 0
	for _, r := range c.reps {
		if r.disabled == nil && r.known && c.effAwake(r) && !r.draining {
			runningN++
		}
	}
	if waiting == 0 {
		c.waitingTicks = 0
	} else {
		c.waitingTicks++
	}
	urgent := waiting > 0 && (runningN == 0 || waiting >= runningN*capacity || c.waitingTicks >= urgentTicks)
	if urgent {
		need = max(need, runningN+(waiting+capacity-1)/capacity)
	}
	c.need = need
	if !c.acting() {
		// Another gateway of the cluster decides: this one applies its
		// decisions to its own pool.
		if c.cfg.Mode == ModeOn {
			for _, r := range c.reps {
				c.applyParked(r)
			}
		}
		return
	}
	if c.shared != nil {
		defer c.save(ctx)
	}

	// Who is awake (or waking), in the order they are kept: holds first,
	// then those not draining, then configuration order. The order must
	// be stable: ranking by each tick's load would spread "needed" over
	// every replica in turn and none would ever stay unneeded.
	var up, down []*repState
	for _, r := range c.reps {
		if r.hold != HoldAuto && !r.holdUntil.IsZero() && !now.Before(r.holdUntil) {
			r.hold, r.holdUntil = HoldAuto, time.Time{}
		}
		if r.disabled != nil || !r.known {
			continue
		}
		switch {
		case c.effAwake(r) || c.effWaking(r):
			up = append(up, r)
		case c.effParked(r):
			down = append(down, r)
		}
		// other stages (errors, builds of a new commit) are not the
		// policy's to change
	}
	sort.SliceStable(up, func(i, j int) bool {
		a, b := up[i], up[j]
		if (a.hold == HoldAwake) != (b.hold == HoldAwake) {
			return a.hold == HoldAwake
		}
		return !a.draining && b.draining
	})
	// Hysteresis: a replica stays needed until the forecast would fit the
	// others at 3/4 of the utilization that wakes one, so that demand near
	// a boundary does not wake and park the same replica all day.
	keepNeed := max(need, int(math.Ceil(c.forecast/(per*0.75))))
	kept := 0
	var late []string
	for _, r := range up {
		if c.overdue(r, now) {
			late = append(late, r.Name)
			continue
		}
		if r.hold == HoldParked {
			continue
		}
		if kept < keepNeed || r.hold == HoldAwake {
			kept++
			r.lastNeeded = now
			if r.draining { // needed again: stop draining
				c.undrain(r, now, "demand came back")
			}
		}
	}
	// Wake.
	for _, r := range down {
		if kept >= need && r.hold != HoldAwake {
			continue
		}
		if r.hold == HoldParked {
			continue
		}
		reason := fmt.Sprintf("need %d awake for demand %.1f, forecast %.1f at +%v", need, demand, c.forecast, lead.Round(time.Second))
		if urgent {
			reason = fmt.Sprintf("%d callers waiting and %d awake", waiting, kept)
		}
		if r.hold == HoldAwake {
			reason = "held awake by an operator"
		}
		if len(late) > 0 {
			reason += "; the wake of " + strings.Join(late, ", ") + " is overdue"
		}
		if c.wake(ctx, r, now, reason) {
			kept++
		}
	}
	// Park.
	for _, r := range up {
		if r.disabled != nil {
			continue
		}
		unneeded := now.Sub(r.lastNeeded)
		switch {
		case r.hold == HoldParked:
			c.park(ctx, r, now, "held parked by an operator")
		case r.hold == HoldAwake || unneeded == 0:
		case !c.effAwake(r): // waking: parked only once it runs
		case unneeded < c.parkAfter(r):
		case now.Sub(r.awakeSince) < c.cfg.MinAwakeAfterWake:
		default:
			c.park(ctx, r, now, fmt.Sprintf("unneeded for %v (need %d awake, demand %.1f, forecast %.1f)",
				unneeded.Round(time.Second), need, demand, c.forecast))
		}
	}
}

// publishETA tells the Target when the first waking replica should run.
func (c *Controller) publishETA(now time.Time) {
	es, ok := c.target.(ETASetter)
	if !ok || c.cfg.Mode != ModeOn {
		return
	}
	var eta time.Time
	for _, r := range c.reps {
		if waking(r.stage) && !r.wakeSent.IsZero() && !c.overdue(r, now) {
			if t := r.wakeSent.Add(c.wakeTime(r)); eta.IsZero() || t.Before(eta) {
				eta = t
			}
		}
	}
	es.SetWakeETA(eta)
}

// effAwake / effWaking: the stage, or in dry run the would-be stage. A
// replica put to sleep (LeverSleep) is parked while its Space still runs
// out its sleep time.
func (c *Controller) effAwake(r *repState) bool {
	if c.cfg.Mode == ModeDryRun && r.dryParked || r.sleepSet {
		return false
	}
	return awake(r.stage)
}

func (c *Controller) effParked(r *repState) bool {
	if c.cfg.Mode == ModeDryRun && r.dryParked || r.sleepSet && (awake(r.stage) || parkedStage(r.stage)) {
		return true
	}
	return parkedStage(r.stage)
}

func (c *Controller) effWaking(r *repState) bool {
	if c.cfg.Mode == ModeDryRun && r.dryParked {
		return false
	}
	return waking(r.stage)
}

// refresh reads the stages due.
func (c *Controller) refresh(ctx context.Context, now time.Time) {
	for _, r := range c.reps {
		if r.disabled != nil {
			continue
		}
		due := !r.known || waking(r.stage) || r.draining || now.Sub(r.stageAt) >= c.cfg.StatusEvery
		if !due {
			continue
		}
		rt, err := c.hub.Runtime(ctx, r.Space)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			c.hubFailed(r, now, "status", err)
			continue
		}
		if rt.Stage == StageStopped && now.Sub(r.visited) < visitGrace {
			continue // the visit that wakes it is on its way
		}
		first := !r.known
		c.setStage(r, rt.Stage, now)
		if first && c.cfg.Mode == ModeOn && rt.GCTimeout != nil && *rt.GCTimeout == c.sleepSeconds() {
			// The Hub keeps the sleep time this policy set before the
			// gateway (re)started: the Space is parked by it (LeverSleep),
			// so that when it is needed its sleep time goes back to never
			// rather than stopping it whenever idle.
			r.sleepSet = true
			c.setParked(r, true)
		}
	}
}

// sleepSeconds is the sleep time LeverSleep sets, in the Hub's seconds.
func (c *Controller) sleepSeconds() int { return max(int(c.cfg.SleepTime.Seconds()), 1) }

func (c *Controller) setStage(r *repState, stage string, now time.Time) {
	was := r.stage
	r.stage, r.stageAt, r.known = stage, now, true
	if awake(stage) && !awake(was) {
		if !r.wakeSent.IsZero() {
			r.wakeTimes = append(r.wakeTimes, now.Sub(r.wakeSent))
			if len(r.wakeTimes) > 9 {
				r.wakeTimes = r.wakeTimes[1:]
			}
			r.wakeSent = time.Time{}
		}
		r.awakeSince = now
		r.lastNeeded = now
		if r.parkedHere && c.cfg.Mode == ModeOn {
			c.setParked(r, false)
		}
	}
	if parkedStage(stage) && c.cfg.Mode == ModeOn && !r.parkedHere {
		// parked by us earlier, by HF's sleep time or by hand: a state
		c.setParked(r, true)
	}
	if !awake(stage) && !waking(stage) && !parkedStage(stage) && r.parkedHere && c.cfg.Mode == ModeOn {
		// Its Space failed (RUNTIME_ERROR, BUILD_ERROR, ...) while the
		// policy had it parked or waking: a failure, not a state. The
		// pool gets it back, so that its health checks judge it, eject
		// it and alert; the policy leaves that stage to its owner.
		if !r.wakeSent.IsZero() {
			c.record(Action{At: now, Replica: r.Name, Kind: ActionWake, Result: ResultFailed,
				Reason: fmt.Sprintf("its Space went %s while waking", stage)})
			r.wakeSent = time.Time{}
		}
		r.draining, r.sleepSet = false, false
		c.setParked(r, false)
	}
}

func (c *Controller) hubFailed(r *repState, now time.Time, op string, err error) {
	var he *HubError
	if errors.As(err, &he) && he.Forbidden() {
		r.disabled = fmt.Errorf("autoscale: stopped managing %s: the Hub refused the token (%d) on %s; it needs the Space owner's token with write access", r.Space, he.Status, op)
		c.log.Error("autoscale: replica no longer managed", "replica", r.Name, "space", r.Space, "status", he.Status, "op", op)
		if r.parkedHere && c.cfg.Mode == ModeOn {
			c.setParked(r, false) // let the pool's own health checks judge it
		}
		c.record(Action{At: now, Replica: r.Name, Kind: op, Result: ResultFailed, Reason: "hub refused the token", Error: err.Error()})
		return
	}
	if errors.Is(err, ErrHubBudget) || (errors.As(err, &he) && he.Status == 429) {
		c.count(op, ResultBlocked)
		return
	}
	c.log.Warn("autoscale: hub call failed", "replica", r.Name, "op", op, "err", err)
	c.count(op, ResultFailed)
}

func (c *Controller) wake(ctx context.Context, r *repState, now time.Time, reason string) bool {
	if !c.budgetOK(r, now, 1) {
		c.record(Action{At: now, Replica: r.Name, Kind: ActionWake, Result: ResultBlocked, Reason: reason + "; flap budget spent"})
		return false
	}
	if c.cfg.Mode == ModeDryRun {
		r.actions = append(r.actions, now)
		r.dryParked = false
		r.drySaved += now.Sub(r.dryParkAt)
		r.awakeSince, r.lastNeeded = now, now
		c.record(Action{At: now, Replica: r.Name, Kind: ActionWake, Result: ResultDryRun, Reason: reason})
		return true
	}
	if !c.mayAct() {
		return false
	}
	if r.sleepSet {
		return c.wakeSleeper(ctx, r, now, reason)
	}
	rt, err := c.hub.Restart(ctx, r.Space)
	if err != nil {
		c.hubFailed(r, now, ActionWake, err)
		if r.disabled == nil {
			c.record(Action{At: now, Replica: r.Name, Kind: ActionWake, Result: ResultFailed, Reason: reason, Error: err.Error()})
		}
		return false
	}
	r.actions = append(r.actions, now)
	r.wakeSent = now
	r.awakeSince, r.lastNeeded = now, now // its minimum awake time starts now
	c.setStage(r, rt.Stage, now)
	c.record(Action{At: now, Replica: r.Name, Kind: ActionWake, Result: ResultOK, Reason: reason})
	return true
}

// wakeSleeper wakes a replica put to sleep (LeverSleep): its sleep time
// is set back to never; a Space still running takes calls again at once,
// a stopped one is visited (Waker), else restarted.
func (c *Controller) wakeSleeper(ctx context.Context, r *repState, now time.Time, reason string) bool {
	rt, err := c.hub.SetSleepTime(ctx, r.Space, -1)
	if err != nil {
		c.hubFailed(r, now, ActionWake, err)
		if r.disabled == nil {
			c.record(Action{At: now, Replica: r.Name, Kind: ActionWake, Result: ResultFailed, Reason: reason, Error: err.Error()})
		}
		return false
	}
	r.sleepSet = false
	r.actions = append(r.actions, now)
	r.awakeSince, r.lastNeeded = now, now
	c.setStage(r, rt.Stage, now)
	switch {
	case awake(rt.Stage): // still running out its sleep time: back at once
		c.setParked(r, false)
		reason += "; its Space had not stopped yet"
	case rt.Stage == StageStopped:
		r.wakeSent = now
		if wk, ok := c.target.(Waker); ok {
			wk.Wake(r.Name)
			r.visited = now
			r.stage = StageStarting // as far as the policy knows: read again next tick
			reason += "; visited (no build)"
		} else if rt, err = c.hub.Restart(ctx, r.Space); err == nil {
			c.setStage(r, rt.Stage, now)
		}
	}
	if err != nil {
		c.hubFailed(r, now, ActionWake, err)
		c.record(Action{At: now, Replica: r.Name, Kind: ActionWake, Result: ResultFailed, Reason: reason, Error: err.Error()})
		return false
	}
	c.record(Action{At: now, Replica: r.Name, Kind: ActionWake, Result: ResultOK, Reason: reason})
	return true
}

// park drains the replica, then pauses it once its calls are done.
func (c *Controller) park(ctx context.Context, r *repState, now time.Time, reason string) {
	if c.cfg.Mode == ModeDryRun {
		if !c.budgetOK(r, now, 2) {
			return
		}
		r.actions = append(r.actions, now)
		r.dryParked, r.dryParkAt = true, now
		c.record(Action{At: now, Replica: r.Name, Kind: ActionPark, Result: ResultDryRun, Reason: reason})
		return
	}
	if !r.draining {
		if !c.budgetOK(r, now, 2) {
			if r.lastReason != "budget" {
				c.record(Action{At: now, Replica: r.Name, Kind: ActionPark, Result: ResultBlocked, Reason: reason + "; flap budget spent"})
				r.lastReason = "budget"
			}
			return
		}
		r.draining, r.drainSince = true, now
		c.setParked(r, true)
		c.record(Action{At: now, Replica: r.Name, Kind: ActionDrain, Result: ResultOK, Reason: reason})
	}
	l := c.loads[r.Name] // over every gateway of a cluster
	if l.InUse+l.Waiting > 0 && now.Sub(r.drainSince) < c.cfg.DrainTimeout {
		return // calls in flight finish first
	}
	if !c.mayAct() {
		return
	}
	if c.cfg.Lever == LeverSleep {
		rt, err := c.hub.SetSleepTime(ctx, r.Space, c.sleepSeconds())
		if err != nil {
			c.hubFailed(r, now, ActionPark, err)
			if r.disabled == nil {
				c.record(Action{At: now, Replica: r.Name, Kind: ActionPark, Result: ResultFailed, Reason: reason, Error: err.Error()})
			}
			return
		}
		r.draining, r.sleepSet, r.lastReason = false, true, ""
		r.actions = append(r.actions, now)
		c.setStage(r, rt.Stage, now)
		c.record(Action{At: now, Replica: r.Name, Kind: ActionPark, Result: ResultOK,
			Reason: fmt.Sprintf("%s; sleep time %v (stops once idle that long)", reason, c.cfg.SleepTime)})
		return
	}
	rt, err := c.hub.Pause(ctx, r.Space)
	if err != nil {
		c.hubFailed(r, now, ActionPark, err)
		if r.disabled == nil {
			c.record(Action{At: now, Replica: r.Name, Kind: ActionPark, Result: ResultFailed, Reason: reason, Error: err.Error()})
		}
		return
	}
	r.draining = false
	r.lastReason = ""
	r.actions = append(r.actions, now)
	c.setStage(r, rt.Stage, now)
	c.record(Action{At: now, Replica: r.Name, Kind: ActionPark, Result: ResultOK, Reason: reason})
}

func (c *Controller) undrain(r *repState, now time.Time, reason string) {
	r.draining = false
	if r.parkedHere {
		c.setParked(r, false)
	}
	c.record(Action{At: now, Replica: r.Name, Kind: ActionDrain, Result: "cancelled", Reason: reason})
}

func (c *Controller) count(kind, result string) {
	c.mu.Lock()
	c.counts[[2]string{kind, result}]++
	c.mu.Unlock()
}

func (c *Controller) record(a Action) {
	c.count(a.Kind, a.Result)
	if c.shared != nil {
		c.unsaved = append(c.unsaved, a)
	}
	c.actions = append(c.actions, a)
	if len(c.actions) > 200 {
		c.actions = c.actions[len(c.actions)-200:]
	}
	attrs := []any{"replica", a.Replica, "action", a.Kind, "result", a.Result, "reason", a.Reason}
	if a.Error != "" {
		attrs = append(attrs, "err", a.Error)
	}
	c.log.Info("autoscale", attrs...)
}

// SetHold holds a replica awake or parked for d (HoldAuto ends a hold);
// the next Tick applies it.
func (c *Controller) SetHold(replica string, h Hold, d time.Duration) error {
	if h != HoldAuto && h != HoldAwake && h != HoldParked {
		return fmt.Errorf("autoscale: hold %q: want auto, awake or parked", h)
	}
	if h != HoldAuto && d <= 0 {
		return fmt.Errorf("autoscale: a hold needs a positive duration")
	}
	for _, r := range c.reps { // the list never changes
		if r.Name == replica {
			ph := pendingHold{hold: h}
			if h != HoldAuto {
				ph.until = c.now().Add(d)
			}
			if c.shared != nil { // every gateway's, applied by the acting one
				return c.shared.SetHold(context.Background(), replica, h, ph.until)
			}
			c.mu.Lock()
			c.holds[replica] = ph
			c.mu.Unlock()
			return nil
		}
	}
	return fmt.Errorf("autoscale: no replica %q", replica)
}
