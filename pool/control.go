package pool

// Operator controls: an operator takes one replica out of rotation by hand
// (HAProxy's "disable server", pgbouncer's DISABLE) without editing the
// replica list. The control is kept by replica name on the Pool, not on the
// replica, so a reload that keeps the replica keeps its control; the
// gateway shares it between gateways through Redis (see SetControl).
//
// The hooks are one line each: admit refuses a held replica (so acquire
// moves the caller to the next replica, and Reserve with a pinned replica
// answers *ReplicaError wrapping ErrHeld), usable leaves it out of the
// least-loaded and expected-time scans, Ready does not count it, and
// sidelined moves the callers of a disabled one. A caller already waiting
// in a drained replica's queue keeps its place (drain: what was admitted
// runs); one waiting in a disabled replica's queue is moved once its
// session comes (sidelined), nothing having been sent: it waits for that
// turn, up to the queue time-out, like any waiter.

import (
	"errors"
	"fmt"
	"maps"
)

// Control is an operator's hold on one replica.
type Control string

// Controls.
const (
	// ControlEnabled: the replica is in rotation (the default).
	ControlEnabled Control = "enabled"
	// ControlDrain: the replica takes no new call; the calls it runs and
	// the callers already in its queue finish there. Its stats state is
	// draining until none is left, then drained; it holds there until
	// enabled.
	ControlDrain Control = "drain"
	// ControlDisable: the replica takes no new call at once, and callers
	// waiting in its queue move to another replica. Calls already sent
	// run to their end (cutting them could run them twice).
	ControlDisable Control = "disable"
)

// Operator states shown in ReplicaStats.Operator.
const (
	OperatorEnabled  = "enabled"
	OperatorDraining = "draining" // drain asked, calls still running there
	OperatorDrained  = "drained"  // drain asked, nothing running: held
	OperatorDisabled = "disabled"
)

// ParseControl parses "enabled"/"enable", "drain" or "disable".
func ParseControl(s string) (Control, error) {
	switch s {
	case "enable", string(ControlEnabled):
		return ControlEnabled, nil
	case string(ControlDrain):
		return ControlDrain, nil
	case string(ControlDisable):
		return ControlDisable, nil
	}
	return "", fmt.Errorf("pool: control %q, want enable, drain or disable", s)
}

// ErrHeld is wrapped by the cause of a replica skipped because an operator
// drained or disabled it.
var ErrHeld = errors.New("pool: replica held by an operator")

// heldError says which hold skipped the replica.
type heldError struct{ c Control }

func (e *heldError) Error() string {
	if e.c == ControlDrain {
		return "drained by an operator"
	}
	return "disabled by an operator"
}

func (e *heldError) Unwrap() error { return ErrHeld }

// SetControl applies an operator control to the replica named name and
// reports whether it changed anything. An unknown name is an error
// wrapping ErrUnknownReplica.
func (p *Pool) SetControl(name string, c Control) (changed bool, err error) {
	if _, err := ParseControl(string(c)); err != nil {
		return false, err
	}
	if p.set.Load().byName[name] == nil {
		return false, fmt.Errorf("%w %q", ErrUnknownReplica, name)
	}
	p.ctlMu.Lock()
	m := p.Controls()
	was := m[name]
	if was == "" {
		was = ControlEnabled
	}
	if was != c {
		if c == ControlEnabled {
			delete(m, name)
		} else {
			m[name] = c
		}
		p.ctlMap.Store(&m)
	}
	p.ctlMu.Unlock()
	if was == c {
		return false, nil
	}
	if c != ControlEnabled {
		// Sticky users' own sessions there end after their call in
		// flight: their next call goes elsewhere anyway.
		p.sticky.dropReplica(p.set.Load().byName[name])
	}
	p.emit(Event{Kind: EventControl, Replica: name, Reason: string(c), Previous: string(was)})
	return true, nil
}

// Controls returns the replicas an operator holds (drained or disabled),
// by name.
func (p *Pool) Controls() map[string]Control {
	m := p.ctlMap.Load()
	if m == nil {
		return map[string]Control{}
	}
	return maps.Clone(*m)
}

// control is r's operator control.
func (r *replica) control() Control {
	if m := r.p.ctlMap.Load(); m != nil {
		if c, ok := (*m)[r.name]; ok {
			return c
		}
	}
	return ControlEnabled
}

// held returns why an operator keeps new calls off r, or nil.
func (r *replica) held() error {
	if c := r.control(); c != ControlEnabled {
		return &heldError{c: c}
	}
	return nil
}

// movesWaiters reports whether callers waiting in r's queue must move on
// when their session comes (disable), instead of running there (drain).
func (r *replica) movesWaiters() error {
	if c := r.control(); c == ControlDisable {
		return &heldError{c: c}
	}
	return nil
}

// operatorState is what ReplicaStats.Operator shows, given the calls r
// runs now.
func (r *replica) operatorState(inUse int) string {
	switch r.control() {
	case ControlDrain:
		if inUse > 0 {
			return OperatorDraining
		}
		return OperatorDrained
	case ControlDisable:
		return OperatorDisabled
	}
	return OperatorEnabled
}
