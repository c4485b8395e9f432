package pool

import (
	"errors"
	"fmt"
	"time"
)

// StateParked is the state of a replica parked by an autoscaler (its Space
// paused or asleep on purpose): a state, not a failure.
const StateParked = "parked"

// ErrParked is the cause recorded when a call skips a parked replica.
var ErrParked = errors.New("pool: replica parked (its Space is paused to save cost)")

// SetParked parks a replica (true) or ends it (false). A parked replica
// takes no new call and no new user (sticky users move at their next
// call); calls in flight there finish; it is not probed, and failures
// seen there do not eject it and raise no alert. The autoscaler
// (package autoscale) parks a replica before it pauses the Space and
// ends it once the Space runs again.
func (p *Pool) SetParked(replica string, parked bool) error {
	r := p.set.Load().byName[replica]
	if r == nil {
		return fmt.Errorf("pool: no replica %q", replica)
	}
	if r.parked.Swap(parked) == parked {
		return nil
	}
	if !parked {
		// The Space restarted: what the pool knew of it (failures seen
		// while it was parked are ignored, an old ejection) is stale.
		r.mu.Lock()
		r.ejectUntil, r.fails, r.callFails, r.halfOpen, r.suspect = time.Time{}, 0, 0, false, false
		r.mu.Unlock()
	}
	return nil
}
