package pool

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// defaultWakeTimeout bounds the background wake of a sleeping Space
// (Config.WakeSleeping): a Hugging Face Space takes minutes to wake.
const defaultWakeTimeout = 5 * time.Minute

// asleep: err says the replica's Space sleeps or was stopped (it costs
// nothing so; only WakeSleeping wakes it, never the prober).
func asleep(err error) bool {
	var se *gradio.SpaceError
	if !errors.As(err, &se) {
		return false
	}
	st := strings.ToUpper(se.Stage)
	return st == "SLEEPING" || st == "STOPPED"
}

// wakeIfSleeping starts, when Config.WakeSleeping is on and err says the
// replica's Space is asleep, one background connect that wakes the Space
// and waits for it (gradio.WithWakeTimeout). Calls meanwhile fail over at
// once as before; once the Space runs, the replica is connected and its
// ejection lifted, so that the users pinned to it find it awake.
func (r *replica) wakeIfSleeping(err error) {
	if !r.p.cfg.WakeSleeping || !asleep(err) {
		return
	}
	r.wakeSpace()
}

// Wake visits a replica's Space in the background (a connect that waits
// for it, as Config.WakeSleeping does): a request to its app wakes a
// STOPPED Space. The autoscaler wakes Spaces it put to sleep so; the
// replica stays parked until the autoscaler ends it (SetParked).
func (p *Pool) Wake(replica string) error {
	r := p.set.Load().byName[replica]
	if r == nil {
		return fmt.Errorf("pool: no replica %q", replica)
	}
	r.wakeSpace()
	return nil
}

// wakeSpace starts one background connect that wakes the Space and waits
// for it (at most one at a time per replica).
func (r *replica) wakeSpace() {
	p := r.p
	if !r.waking.CompareAndSwap(false, true) {
		return // already waking
	}
	p.goBackground(func() {
		defer r.waking.Store(false)
		opts := append(p.clientOptions(), gradio.WithWakeTimeout(defaultWakeTimeout))
		start := time.Now()
		app, err := gradio.Connect(p.ctx, r.src, opts...)
		if err != nil {
			if p.ctx.Err() == nil {
				p.emit(Event{Kind: EventConnectFailed, Replica: r.name, Err: err, Duration: time.Since(start)})
			}
			return
		}
		r.mu.Lock()
		if r.closed || r.app != nil { // closed, or connected meanwhile by a caller
			r.mu.Unlock()
			_ = app.Close()
			return
		}
		r.app, r.baseURL = app, app.BaseURL()
		r.gen++
		r.mu.Unlock()
		p.emit(Event{Kind: EventConnected, Replica: r.name, Duration: time.Since(start)})
		r.probePassed()
	})
}
