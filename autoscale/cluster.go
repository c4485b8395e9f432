package autoscale

import (
	"context"
	"errors"
	"time"
)

// SetShared makes the controller one of a cluster's (issue 34 item 4):
// each Tick it publishes this gateway's demand and reads every gateway's
// through s, acts only while it holds s's lease, and otherwise applies
// the acting gateway's decisions to its own pool. Call it before Run.
func (c *Controller) SetShared(s Shared) {
	c.tickMu.Lock()
	c.shared = s
	c.tickMu.Unlock()
}

// acting: this controller decides (alone, or holding the cluster's lease).
func (c *Controller) acting() bool { return c.shared == nil || c.token > 0 }

// mayAct is checked right before every Hub write: the lease taken at this
// tick's start must still be this gateway's by its own clock.
func (c *Controller) mayAct() bool { return c.shared == nil || c.shared.Acting() }

// setParked records the policy's decision for r and applies it to this
// gateway's pool.
func (c *Controller) setParked(r *repState, v bool) {
	r.parkedHere = v
	c.applyParked(r)
}

// applyParked tells this gateway's pool what the policy decided for r.
func (c *Controller) applyParked(r *repState) {
	if r.localParked != r.parkedHere {
		c.target.SetParked(r.Name, r.parkedHere)
		r.localParked = r.parkedHere
	}
}

// sync renews the lease and reads the cluster's demand, state, holds and
// log into the controller; it answers the callers waiting on no replica
// over every gateway, and false when Redis did not answer (then this
// gateway does not act: it cannot know it is the only one).
func (c *Controller) sync(ctx context.Context, now time.Time, poolWaiting int) (int, bool) {
	local := GatewayDemand{Replicas: c.loads, Waiting: poolWaiting}
	res, err := c.shared.Sync(ctx, local)
	if err != nil {
		if !c.sharedErr {
			c.log.Warn("autoscale: shared state unreachable: this gateway does not act until it answers", "err", err)
			c.sharedErr = true
		}
		c.token = 0
		c.leader = ""
		return 0, false
	}
	if c.sharedErr {
		c.log.Info("autoscale: shared state reachable again")
		c.sharedErr = false
	}
	was := c.token
	c.token, c.leader = res.Token, res.Holder
	switch {
	case res.Token > 0 && res.Token != was:
		c.log.Info("autoscale: this gateway acts for the cluster", "token", res.Token)
		c.loadShared(res.State) // take over where the last one left
		c.unsaved = nil
	case res.Token == 0 && was > 0:
		c.log.Warn("autoscale: another gateway acts for the cluster now", "gateway", res.Holder)
		c.loadShared(res.State)
	case res.Token == 0:
		c.loadShared(res.State)
	}
	for _, r := range c.reps {
		h, ok := res.Holds[r.Name]
		if ok && now.Before(h.Until) {
			r.hold, r.holdUntil = h.Hold, h.Until
		} else {
			r.hold, r.holdUntil = HoldAuto, time.Time{}
		}
	}
	if res.Token == 0 || res.Token != was {
		c.actions = res.Log
	}
	// Demand over every gateway: the capacity is this gateway's setting
	// (a replica's limit is the cluster's).
	sum := map[string]Load{}
	waiting := 0
	for _, d := range res.Demand {
		waiting += d.Waiting
		for name, l := range d.Replicas {
			s := sum[name]
			s.InUse += l.InUse
			s.Waiting += l.Waiting
			sum[name] = s
		}
	}
	for name, l := range c.loads {
		s := sum[name]
		s.Capacity = l.Capacity
		c.loads[name] = s
	}
	return waiting, true
}

// save stores the state and the new actions for the other gateways.
func (c *Controller) save(ctx context.Context) {
	state := make(map[string]SharedReplica, len(c.reps))
	for _, r := range c.reps {
		sr := SharedReplica{Stage: r.stage, StageAt: r.stageAt, Known: r.known, LastNeeded: r.lastNeeded,
			AwakeSince: r.awakeSince, Draining: r.draining, DrainSince: r.drainSince, Parked: r.parkedHere, SleepSet: r.sleepSet,
			WakeSent: r.wakeSent, WakeTimes: r.wakeTimes, Actions: r.actions, DryParked: r.dryParked,
			DryParkAt: r.dryParkAt, DrySaved: r.drySaved, AwakeTotal: r.awakeTotal}
		if r.disabled != nil {
			sr.Disabled = r.disabled.Error()
		}
		state[r.Name] = sr
	}
	err := c.shared.Save(ctx, c.token, state, c.unsaved)
	switch {
	case errors.Is(err, ErrFenced):
		c.log.Warn("autoscale: another gateway took the lease: this one stops acting", "token", c.token)
		c.token = 0
		c.unsaved = nil
	case err != nil:
		c.log.Warn("autoscale: saving the shared state failed", "err", err)
	default:
		c.unsaved = nil
	}
}

// loadShared makes the saved state this controller's (a gateway that
// does not act, or takes over).
func (c *Controller) loadShared(state map[string]SharedReplica) {
	for _, r := range c.reps {
		sr, ok := state[r.Name]
		if !ok {
			continue
		}
		r.stage, r.stageAt, r.known, r.lastNeeded = sr.Stage, sr.StageAt, sr.Known, sr.LastNeeded
		r.awakeSince, r.draining, r.drainSince, r.parkedHere, r.sleepSet = sr.AwakeSince, sr.Draining, sr.DrainSince, sr.Parked, sr.SleepSet
		r.wakeSent, r.wakeTimes, r.actions = sr.WakeSent, sr.WakeTimes, sr.Actions
		r.dryParked, r.dryParkAt, r.drySaved, r.awakeTotal = sr.DryParked, sr.DryParkAt, sr.DrySaved, sr.AwakeTotal
		r.disabled = nil
		if sr.Disabled != "" {
			r.disabled = errors.New(sr.Disabled)
		}
	}
}
