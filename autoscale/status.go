package autoscale

import (
	"fmt"
	"time"
)

// ReplicaStatus is one replica as GET /api/admin/autoscale shows it.
type ReplicaStatus struct {
	Name  string `json:"name"`
	Space string `json:"space"`
	// Stage is the Space's stage as last read from the Hub.
	Stage string `json:"stage"`
	// State is awake, waking, draining, parked or unmanaged.
	State string `json:"state"`
	// Why says why it is in that state.
	Why       string     `json:"why"`
	Hold      Hold       `json:"hold"`
	HoldUntil *time.Time `json:"holdUntil,omitempty"`
	// Next is the next planned action and when, if any.
	Next string `json:"next,omitempty"`
	// WakeSeconds is the measured wake time (median of the last wakes),
	// or the estimate until one is measured.
	WakeSeconds  float64 `json:"wakeSeconds"`
	WakeMeasured bool    `json:"wakeMeasured"`
	ActionsHour  int     `json:"actionsLastHour"`
	ActionsDay   int     `json:"actionsLastDay"`
	// AwakeSeconds is the time the controller saw it awake (or would have,
	// in dry run): the billed time it estimates.
	AwakeSeconds float64 `json:"awakeSeconds"`
	// SavedGPUHours (dry run) is the time it would have been parked.
	SavedGPUHours float64 `json:"savedGpuHours,omitempty"`
	// CostPerHour is what the replica's Space bills now by the policy's
	// view (its price while awake or starting, else 0; in dry run what
	// it would bill had the policy acted).
	CostPerHour float64 `json:"costPerHour"`
	Error       string  `json:"error,omitempty"`
}

// Status is the controller's state.
type Status struct {
	Mode     Mode    `json:"mode"`
	Demand   float64 `json:"demand"`
	Forecast float64 `json:"forecast"`
	// ForecastLeadSeconds is how far ahead Forecast looks: the longest
	// wake time of the replicas plus the status interval.
	ForecastLeadSeconds float64         `json:"forecastLeadSeconds"`
	Need                int             `json:"needAwake"`
	MinAwake            int             `json:"minAwake"`
	Replicas            []ReplicaStatus `json:"replicas"`
	// Actions are the latest actions (taken, or in dry run planned).
	Actions []Action `json:"actions"`
	// EstimatedCostPerHour is the replicas' CostPerHour summed: the awake
	// (and starting) replicas times the price.
	EstimatedCostPerHour float64 `json:"estimatedCostPerHour"`
	HubCallsLeft         *int    `json:"hubCallsLeft,omitempty"`
	// Cluster is set in a cluster: which gateway acts.
	Cluster *ClusterStatus `json:"cluster,omitempty"`
}

// ClusterStatus says which gateway of a cluster acts (holds the lease).
type ClusterStatus struct {
	// Acting: this gateway decides and calls the Hub; the others apply
	// its decisions to their pools.
	Acting bool `json:"acting"`
	// Leader is the acting gateway's id (empty: none, or Redis lost).
	Leader string `json:"leader"`
	// FencingToken numbers the lease: every takeover increments it.
	FencingToken int64 `json:"fencingToken,omitempty"`
	// RedisUp is false while the shared state cannot be read (then no
	// gateway of this one's acts).
	RedisUp bool `json:"redisUp"`
}

// Status reports the controller's state as of the last Tick.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hasSnap {
		return Status{Mode: c.cfg.Mode, MinAwake: *c.cfg.MinAwake}
	}
	st := c.snap
	st.Replicas = append([]ReplicaStatus(nil), st.Replicas...)
	st.Actions = append([]Action(nil), st.Actions...)
	return st
}

// publish makes the state after a Tick what Status reports.
func (c *Controller) publish(now time.Time) {
	st := c.statusAt(now)
	c.mu.Lock()
	c.snap, c.hasSnap = st, true
	c.mu.Unlock()
}

// statusAt computes the status; the caller holds tickMu.
func (c *Controller) statusAt(now time.Time) Status {
	st := Status{Mode: c.cfg.Mode, Demand: c.demand, Forecast: c.forecast, ForecastLeadSeconds: c.lead.Seconds(),
		Need: c.need, MinAwake: *c.cfg.MinAwake,
		Actions: append([]Action(nil), c.actions...)}
	if c.shared != nil {
		st.Cluster = &ClusterStatus{Acting: c.token > 0, Leader: c.leader, FencingToken: c.token, RedisUp: !c.sharedErr}
	}
	if hc, ok := c.hub.(*HubClient); ok && c.acting() {
		left, _ := hc.Budget()
		st.HubCallsLeft = &left
	}
	for _, r := range c.reps {
		rs := ReplicaStatus{Name: r.Name, Space: r.Space, Stage: r.stage, Hold: r.hold,
			WakeSeconds: c.wakeTime(r).Seconds(), WakeMeasured: len(r.wakeTimes) > 0,
			AwakeSeconds: r.awakeTotal.Seconds()}
		if !r.holdUntil.IsZero() {
			u := r.holdUntil
			rs.HoldUntil = &u
		}
		for _, t := range r.actions {
			if now.Sub(t) < 24*time.Hour {
				rs.ActionsDay++
				if now.Sub(t) < time.Hour {
					rs.ActionsHour++
				}
			}
		}
		saved := r.drySaved
		if r.dryParked {
			saved += now.Sub(r.dryParkAt)
		}
		rs.SavedGPUHours = saved.Hours()
		switch {
		case r.disabled != nil:
			rs.State, rs.Error, rs.Why = "unmanaged", r.disabled.Error(), "the Hub refused the token"
		case !r.known:
			rs.State, rs.Why = "unknown", "stage not read yet"
		case r.draining:
			rs.State, rs.Why = "draining", "unneeded: no new calls go there; pauses when its calls finish"
			rs.Next = "park at " + r.drainSince.Add(c.cfg.DrainTimeout).Format(time.RFC3339) + " at the latest"
		case c.effParked(r):
			rs.State, rs.Why = "parked", "not needed"
			if r.hold == HoldParked {
				rs.Why = "held parked"
			}
			if r.sleepSet && awake(r.stage) {
				rs.Why += "; sleep time set: its Space stops once idle that long"
				rs.CostPerHour = c.cfg.PricePerHour // it bills until it stops
			}
			rs.Next = "wake when demand or its forecast needs it"
		case c.effWaking(r):
			rs.State, rs.Why = "waking", "woken for demand"
			if c.overdue(r, now) {
				rs.Why += fmt.Sprintf("; overdue (woken %v ago, %v expected): another replica is woken in its place",
					now.Sub(r.wakeSent).Round(time.Second), c.wakeTime(r).Round(time.Second))
			}
			if r.stage == StageStarting { // the Hub bills a start, not a build
				rs.CostPerHour = c.cfg.PricePerHour
			}
		case c.effAwake(r):
			rs.State = "awake"
			rs.CostPerHour = c.cfg.PricePerHour
			switch {
			case r.hold == HoldAwake:
				rs.Why = "held awake"
			case r.lastNeeded.Equal(c.lastTickLocked()):
				rs.Why = "needed for demand or forecast, or min_awake"
			default:
				rs.Why = "unneeded since " + r.lastNeeded.Format(time.RFC3339)
				at := r.lastNeeded.Add(c.parkAfter(r))
				if t := r.awakeSince.Add(c.cfg.MinAwakeAfterWake); t.After(at) {
					at = t
				}
				rs.Next = "drain and park at " + at.Format(time.RFC3339)
			}
		default:
			rs.State, rs.Why = "other", "stage not the policy's to change"
		}
		if rs.State == "draining" || rs.State == "unmanaged" || rs.State == "other" {
			if awake(r.stage) || r.stage == StageStarting {
				rs.CostPerHour = c.cfg.PricePerHour
			}
		}
		st.EstimatedCostPerHour += rs.CostPerHour
		st.Replicas = append(st.Replicas, rs)
	}
	return st
}

func (c *Controller) lastTickLocked() time.Time {
	var t time.Time
	for _, r := range c.reps {
		if r.lastTick.After(t) {
			t = r.lastTick
		}
	}
	return t
}

// Counts reports the actions by kind and result since the start.
func (c *Controller) Counts() map[[2]string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[[2]string]uint64, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}
