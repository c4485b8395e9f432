package sessionpool

import (
	"context"
	"math"
)

// demandTicks is how many times per DemandWindow the demand average is
// updated.
const demandTicks = 10

// demandAlpha is the weight of one tick's sample in the moving average:
// after one DemandWindow a step in demand is 1-1/e (63 %) absorbed.
var demandAlpha = 1 - math.Exp(-1.0/demandTicks)

// Demand tracking (Config.DemandWindow): the pool keeps an exponentially
// weighted moving average of its demand (sessions in use plus callers
// waiting), sampled demandTicks times per window. While demand is above
// its average (a rising load), the pool opens as many sessions beyond the
// demand as it has risen above the average, so that the next callers find
// a session ready instead of waiting for a connect; when demand falls, the
// spare sessions go idle and IdleTimeout closes them (never below
// MinSessions). The sampling timer parks while the pool is quiet.

// demandLocked reacts to a change of demand (an Acquire): it wakes the
// sampler and opens sessions ahead of a rise.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) demandLocked() {
	if p.demandParked {
		p.demandParked = false
		p.demandTimer.Reset(p.cfg.DemandWindow / demandTicks)
	}
	p.growForDemandLocked()
}

// growForDemandLocked starts connects up to demand plus its rise over the
// average (bounded by MaxSessions), unless connects are failing.
// WARNING: caller must hold p.mu.
func (p *Pool[T]) growForDemandLocked() {
	if p.closed || !p.initialized || p.backoff {
		return
	}
	d := p.inUse + p.waitq.n
	rise := float64(d) - p.demandAvg
	if rise <= 0 {
		return
	}
	target := min(d+int(math.Ceil(rise)), p.cfg.MaxSessions)
	for p.open+p.connecting-p.stale < target && p.open+p.connecting < p.cfg.MaxSessions {
		p.connecting++
		p.stat.DemandConnects++
		go p.connect(context.Background(), p.resetGen)
	}
}

// sampleDemand is demandTimer's callback: one step of the moving average.
func (p *Pool[T]) sampleDemand() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	d := float64(p.inUse + p.waitq.n)
	p.demandAvg += demandAlpha * (d - p.demandAvg)
	if d == 0 && p.demandAvg < 0.05 {
		p.demandAvg = 0
		p.demandParked = true // a later Acquire wakes it
		return
	}
	p.growForDemandLocked()
	p.demandTimer.Reset(p.cfg.DemandWindow / demandTicks)
}
