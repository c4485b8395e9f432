package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
		p.unparked()
	}
	return nil
}

// parking lets callers wait for a wake while every replica is parked.
type parking struct {
	mu      sync.Mutex
	wait    time.Duration // 0: no waiting (calls fail at once, as before)
	woke    chan struct{} // closed and replaced at every SetParked(false)
	eta     time.Time     // when the autoscaler expects a replica awake
	waiters atomic.Int64
	// queue are the tickets of the calls waiting for a wake, for their
	// place (QueuePosition.Rank); seq numbers them in arrival order.
	queue map[uint64]struct{}
	seq   uint64
}

// SetWakeWait makes a call that finds every replica parked wait up to d
// for one to be un-parked (SetParked false) instead of failing at once;
// 0 turns waiting off. The autoscaler sets it to autoscale.wake_timeout
// and wakes a Space when callers wait (ParkedWaiters).
func (p *Pool) SetWakeWait(d time.Duration) {
	p.parking.mu.Lock()
	p.parking.wait = max(d, 0)
	p.parking.mu.Unlock()
}

// SetWakeETA records when the autoscaler expects a parked replica to run
// (zero: unknown), for callers to see why they wait.
func (p *Pool) SetWakeETA(t time.Time) {
	p.parking.mu.Lock()
	p.parking.eta = t
	p.parking.mu.Unlock()
}

// WakeETA is the time SetWakeETA recorded (zero: none): when the
// autoscaler expects a parked replica to run.
func (p *Pool) WakeETA() time.Time {
	p.parking.mu.Lock()
	defer p.parking.mu.Unlock()
	return p.parking.eta
}

// ParkedWaiters reports the calls waiting because every replica is parked.
func (p *Pool) ParkedWaiters() int { return int(p.parking.waiters.Load()) }

// unparked wakes the callers waiting for a replica.
func (p *Pool) unparked() {
	p.parking.mu.Lock()
	if p.parking.woke != nil {
		close(p.parking.woke)
		p.parking.woke = nil
	}
	p.parking.mu.Unlock()
}

// wakeCouldServe: no replica took the call, one of them is parked (the
// autoscaler wakes a Space for callers waiting), and none refused it room
// (a full queue is a bound to keep, not a reason to wait). The others may
// have failed, be held by an operator or be down: a wake still serves it.
func wakeCouldServe(causes []*ReplicaError) bool {
	parked := false
	for _, c := range causes {
		if busy(c.Err) {
			return false
		}
		parked = parked || errors.Is(c.Err, ErrParked)
	}
	return parked
}

// waitUnparked waits, when a wake could serve the call (wakeCouldServe)
// and waiting is on, until a replica is un-parked (ok, and the deadline to
// keep for a later wait) or the wait, ctx or the pool ends (not ok).
func (p *Pool) waitUnparked(ctx context.Context, causes []*ReplicaError, until time.Time) (time.Time, bool) {
	if !wakeCouldServe(causes) {
		return until, false
	}
	p.parking.mu.Lock()
	wait := p.parking.wait
	if wait <= 0 {
		p.parking.mu.Unlock()
		return until, false
	}
	if until.IsZero() {
		until = time.Now().Add(wait)
	}
	if p.parking.woke == nil {
		p.parking.woke = make(chan struct{})
	}
	woke := p.parking.woke
	p.parking.mu.Unlock()
	left := time.Until(until)
	if left <= 0 {
		return until, false
	}
	p.parking.waiters.Add(1)
	defer p.parking.waiters.Add(-1)
	if qw, _ := ctx.Value(queueWatcherKey{}).(*QueueWatch); qw != nil {
		ticket := p.enterWakeQueue()
		qw.queuedAt(func() QueuePosition { return p.wakePosition(ticket) })
		defer func() {
			qw.left()
			p.parking.mu.Lock()
			delete(p.parking.queue, ticket)
			p.parking.mu.Unlock()
		}()
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-woke:
		return until, true
	case <-t.C:
	case <-ctx.Done():
	case <-p.ctx.Done():
	}
	return until, false
}

// IsParked reports whether err is a call that no replica took while one
// of them was parked and none refused it room (wakeCouldServe), and none
// woke within the wake wait.
func IsParked(err error) bool {
	var all *AllReplicasFailedError
	return errors.As(err, &all) && wakeCouldServe(all.Causes)
}

// enterWakeQueue numbers a call that starts waiting for a wake.
func (p *Pool) enterWakeQueue() uint64 {
	p.parking.mu.Lock()
	defer p.parking.mu.Unlock()
	if p.parking.queue == nil {
		p.parking.queue = map[uint64]struct{}{}
	}
	p.parking.seq++
	p.parking.queue[p.parking.seq] = struct{}{}
	return p.parking.seq
}

// wakePosition is the place of the call holding ticket among the calls
// waiting for a wake, with the time until the wake the autoscaler expects
// (unknown until it has woken a Space; 0 once that time has passed).
func (p *Pool) wakePosition(ticket uint64) QueuePosition {
	p.parking.mu.Lock()
	defer p.parking.mu.Unlock()
	pos := QueuePosition{Waking: true, Size: len(p.parking.queue)}
	for t := range p.parking.queue {
		if t < ticket {
			pos.Rank++
		}
	}
	if !p.parking.eta.IsZero() {
		pos.ETA, pos.ETAKnown = max(p.parking.eta.Sub(p.now()), 0), true
	}
	return pos
}
