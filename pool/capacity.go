package pool

import (
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// Routing chooses how anonymous callers pick a replica. Its values are
// the words of the configuration file; the zero value means
// RouteExpectedTime.
type Routing string

const (
	// RouteExpectedTime (the default) sends an anonymous call to the
	// replica where it is expected to complete first: the Space's own
	// queue (from its estimation messages) times its average run time,
	// divided by the concurrency observed there, plus the callers waiting
	// for a session of ours. Ties (within 5 %) go round robin.
	RouteExpectedTime Routing = "expected_time"
	// RouteLeastInUse sends it to the replica with the fewest of our calls
	// in use plus waiting, ignoring what the Space reports (the behaviour
	// before expected-time routing; kept for comparison).
	RouteLeastInUse Routing = "least_in_use"
)

// defaultProcessTime is the run time assumed for an endpoint before any
// replica has reported or completed a call of it.
const defaultProcessTime = time.Second

// processTimeWeight is the weight of a new measured run time in the moving
// average: recent calls count most, a single outlier moves it by a fifth.
const processTimeWeight = 0.2

// overlapFraction: two calls ran at once if they overlapped by at least
// 1/overlapFraction of a run.
const overlapFraction = 10

// tieTolerance: expected times closer than this fraction are a tie (round
// robin), so that replicas measured a few milliseconds apart share the load.
const tieTolerance = 0.05

// capacity is what one replica's Space tells about its queues, per
// endpoint, and what the pool measured of its own calls there.
type capacity struct {
	mu  sync.Mutex // guards eps and every callLoad of the replica; never held during I/O
	eps map[string]*endpointLoad
}

// endpointLoad is one endpoint (one Gradio concurrency group) of a replica.
type endpointLoad struct {
	queueSize  int       // jobs waiting in the Space's queue at reportedAt (ours included)
	reportedAt time.Time // when the last estimation arrived; zero: never
	spaceAvg   time.Duration
	// measuredAvg is a moving average of the run times of our calls
	// (started to done); spaceAvg is the Space's own average (process_starts
	// eta, or rank_eta over rank+1). Either may be 0 (unknown).
	measuredAvg time.Duration
	queued      int                    // our calls accepted but not started
	running     int                    // our calls started, not done
	runs        map[*callLoad]struct{} // the running ones
	concurrency int                    // the most of our calls seen running at once (0: none yet)
	limited     bool                   // one of our calls waited in the Space's queue behind ours
	advised     bool                   // the max_connections advice was given
}

// processTime is the endpoint's average run time, 0 if unknown: the larger
// of the Space's own figure and ours, so that a Space that times only part
// of a call (the simulator times its handler, not its Latency knob) does
// not make its queue look free.
func (e *endpointLoad) processTime() time.Duration {
	return max(e.spaceAvg, e.measuredAvg)
}

// conc is the effective concurrency, Gradio's default of 1 until more of
// our calls were seen running at once.
func (e *endpointLoad) conc() int { return max(e.concurrency, 1) }

// spaceQueue is the Space's queue now: the last report, minus what the
// Space has worked off since at conc jobs per process time, but never less
// than our own calls not started yet.
func (e *endpointLoad) spaceQueue(now time.Time, avg time.Duration) float64 {
	q := 0.0
	if !e.reportedAt.IsZero() {
		q = float64(e.queueSize)
		if avg > 0 {
			q -= now.Sub(e.reportedAt).Seconds() * float64(e.conc()) / avg.Seconds()
		}
	}
	return max(q, float64(e.queued), 0)
}

func (c *capacity) endpoint(ep string) *endpointLoad {
	e := c.eps[ep]
	if e == nil {
		if c.eps == nil {
			c.eps = map[string]*endpointLoad{}
		}
		e = &endpointLoad{}
		c.eps[ep] = e
	}
	return e
}

// callLoad follows one call of ours on a replica, fed by the job's
// gradio.EventHook and ended exactly once.
type callLoad struct {
	r         *replica
	ep        string
	submitted time.Time
	startedAt time.Time // zero until the job started
	ended     bool
	// behindOurs: when the Space reported the call queued, as many of our
	// calls as the concurrency seen were running there.
	behindOurs bool
}

// beginCall counts a call about to be submitted to endpoint ep of r and
// returns its callLoad.
func (r *replica) beginCall(ep string) *callLoad {
	t := &callLoad{r: r, ep: normEndpoint(ep), submitted: time.Now()}
	c := &r.cap
	c.mu.Lock()
	c.endpoint(t.ep).queued++
	c.mu.Unlock()
	return t
}

// normEndpoint keys endpoints by api_name without its leading "/".
func normEndpoint(ep string) string {
	if len(ep) > 0 && ep[0] == '/' {
		return ep[1:]
	}
	return ep
}

// observe sees the job's events (its gradio.EventHook): it runs under the
// job's lock, so it only does bookkeeping (the advice is emitted on a
// goroutine of its own).
func (t *callLoad) observe(ev gradio.Event) {
	switch ev.Kind {
	case gradio.EventQueued:
		t.estimation(ev)
	case gradio.EventStarted:
		t.started(ev.ETA)
	case gradio.EventCompleted, gradio.EventError:
		t.end()
	}
}

func (t *callLoad) estimation(ev gradio.Event) {
	if ev.QueueSize < 0 {
		return
	}
	c := &t.r.cap
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.ended {
		return
	}
	e := c.endpoint(t.ep)
	e.queueSize, e.reportedAt = ev.QueueSize, time.Now()
	if t.startedAt.IsZero() && e.running >= e.conc() {
		t.behindOurs = true
	}
	if ev.ETA > 0 && ev.Rank >= 0 {
		e.spaceAvg = ev.ETA / time.Duration(ev.Rank+1)
	}
}

func (t *callLoad) started(avg time.Duration) {
	c := &t.r.cap
	now := time.Now()
	c.mu.Lock()
	if t.ended || !t.startedAt.IsZero() {
		c.mu.Unlock()
		return
	}
	e := c.endpoint(t.ep)
	t.startedAt = now
	e.queued--
	e.running++
	if avg > 0 {
		e.spaceAvg = avg
	}
	// It left the queue: the Space's queue is one shorter than reported.
	if e.queueSize > 0 {
		e.queueSize--
	}
	// Queued behind as many of our own calls as the concurrency seen, and
	// kept waiting for over half a run: the Space, not we, held it back.
	if pt := e.processTime(); t.behindOurs && pt > 0 && now.Sub(t.submitted) > pt/2 {
		e.limited = true
	}
	if e.runs == nil {
		e.runs = map[*callLoad]struct{}{}
	}
	e.runs[t] = struct{}{}
	e.concurrency = max(e.concurrency, 1)
	advise := e.limited && !e.advised && t.r.p.live.Load().maxConns > e.conc()
	if advise {
		e.advised = true
	}
	conc := e.conc()
	c.mu.Unlock()
	if advise {
		p := t.r.p
		p.goBackground(func() { // not under the job's lock: the hook may be slow
			p.emit(Event{Kind: EventConcurrencyLimited, Replica: t.r.name, Endpoint: t.ep, Concurrency: conc})
		})
	}
}

// end ends the call's bookkeeping once: at the job's final event, or when
// the call was never accepted.
func (t *callLoad) end() {
	c := &t.r.cap
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.ended {
		return
	}
	t.ended = true
	e := c.endpoint(t.ep)
	if t.startedAt.IsZero() {
		e.queued--
		return
	}
	e.running--
	delete(e.runs, t)
	run := now.Sub(t.startedAt)
	// The calls that ran at once with this one: those still running that
	// overlapped it by a tenth of its run or more. (A call that started
	// as this one ended is not one: its start may be read first, as it
	// comes on another session's stream.)
	n := 1
	for o := range e.runs {
		if now.Sub(o.startedAt) >= run/overlapFraction {
			n++
		}
	}
	e.concurrency = max(e.concurrency, n)
	if e.measuredAvg == 0 {
		e.measuredAvg = run
	} else {
		e.measuredAvg += time.Duration(processTimeWeight * float64(run-e.measuredAvg))
	}
}

// expected is how long a new call of endpoint ep ("" any: a lease) would
// take to complete on r: the work ahead of it in the Space's queues and
// its own run, spread over the effective concurrency, plus the callers
// already waiting for one of our sessions there. fallback gives the
// process time of an endpoint this replica knows nothing of.
func (r *replica) expected(ep string, now time.Time, fallback func(string) time.Duration) time.Duration {
	st := r.sp.Stat()
	waiters := st.Waiting + int(r.stickyWaiting.Load()) + r.p.limiterWaiting(r)
	c := &r.cap
	c.mu.Lock()
	defer c.mu.Unlock()
	avgOf := func(name string, e *endpointLoad) time.Duration {
		if pt := e.processTime(); pt > 0 {
			return pt
		}
		return fallback(name)
	}
	var ahead float64 // seconds of work ahead of the new call
	tracked := 0
	for name, e := range c.eps {
		tracked += e.queued + e.running
		if ep != "" && name != ep {
			continue
		}
		avg := avgOf(name, e)
		ahead += avg.Seconds() * (e.spaceQueue(now, avg) + float64(e.running)) / float64(e.conc())
	}
	own, conc := fallback(ep), 1
	if e := c.eps[ep]; ep != "" && e != nil {
		own, conc = avgOf(ep, e), e.conc()
	}
	// Sessions in use by leases whose calls we do not see count as one
	// run each.
	untracked := max(st.InUse-tracked, 0)
	ahead += own.Seconds() * float64(waiters+untracked) / float64(conc)
	return time.Duration((ahead + own.Seconds()) * float64(time.Second))
}

// processTimes returns, per endpoint, the mean process time known over
// every replica: the fallback for a replica that has not run it yet.
func (p *Pool) processTimes() func(string) time.Duration {
	sum := map[string]time.Duration{}
	n := map[string]int{}
	var all time.Duration
	alln := 0
	for _, r := range p.set.Load().list {
		r.cap.mu.Lock()
		for name, e := range r.cap.eps {
			if pt := e.processTime(); pt > 0 {
				sum[name] += pt
				n[name]++
				all += pt
				alln++
			}
		}
		r.cap.mu.Unlock()
	}
	return func(ep string) time.Duration {
		if n[ep] > 0 {
			return sum[ep] / time.Duration(n[ep])
		}
		if ep == "" && alln > 0 {
			return all / time.Duration(alln)
		}
		return defaultProcessTime
	}
}

// quickest returns the usable replica where a call of ep is expected to
// complete first, scanning from start (ties, within tieTolerance, go to
// the first found: round robin), and every usable replica's expectation.
func (p *Pool) quickest(list []*replica, ep string, start int) (best *replica, exp map[*replica]time.Duration) {
	n := len(list)
	now := time.Now()
	fallback := p.processTimes()
	exp = make(map[*replica]time.Duration, n)
	var bestT time.Duration
	for tier, r := range candidates(list, start, now) {
		if tier > 0 && best != nil {
			break
		}
		t := r.expected(ep, now, fallback)
		exp[r] = t
		if best == nil || float64(t) < float64(bestT)*(1-tieTolerance) {
			best, bestT = r, t
		}
	}
	return best, exp
}

// dueForProbe returns a replica that is ejected, whose back-off has passed
// and that no caller is probing yet, or nil.
func (p *Pool) dueForProbe(list []*replica, start int) *replica {
	now := time.Now()
	for i := range list {
		r := list[(start+i)%len(list)]
		if r.trialDue(now) {
			return r
		}
	}
	return nil
}

// anonymousFirst is the replica an anonymous call of endpoint ("": any)
// starts with.
func (p *Pool) anonymousFirst(list []*replica, endpoint string) *replica {
	if p.cfg.Routing == RouteLeastInUse {
		return p.leastLoaded(list)
	}
	n := len(list)
	start := int(p.rrAnon.Add(1)-1) % n
	if r := p.dueForProbe(list, start); r != nil {
		// An ejected replica whose back-off has passed is probed by the
		// next caller routed to it (failover.go): send one, or expected-time
		// routing could avoid it for ever and its capacity never come back.
		// The probe runs before the call, which moves on if it fails.
		return r
	}
	best, _ := p.quickest(list, endpoint, start)
	if best == nil {
		return list[start]
	}
	return best
}

// rebalanced returns the replica a registered user pinned to assigned
// should use: assigned itself (stickiness first) unless RebalanceFactor is
// set and the call is expected to take more than that factor times longer
// there than on the quickest replica.
func (p *Pool) rebalanced(list []*replica, endpoint string, assigned *replica) *replica {
	f := p.cfg.RebalanceFactor
	if f <= 0 || len(list) < 2 {
		return assigned
	}
	best, exp := p.quickest(list, endpoint, max(slices.Index(list, assigned), 0))
	mine, ok := exp[assigned]
	if best == nil || best == assigned || !ok {
		return assigned
	}
	if float64(mine) > f*float64(exp[best]) {
		return best
	}
	return assigned
}

// jobHook is the event hook a job is submitted with: its events feed the
// replica's capacity bookkeeping and, when the call is traced, drive its
// queue, run and stream spans. (A job has one event hook: this one calls
// both.)
func jobHook(load *callLoad, ct *callTrace) gradio.EventHook {
	if ct == nil {
		return load.observe
	}
	return func(ev gradio.Event) {
		load.observe(ev)
		ct.onEvent(ev)
	}
}

// EndpointLoad is what the pool knows of one endpoint's queue on one
// replica (ReplicaStats.Endpoints).
type EndpointLoad struct {
	// SpaceQueue is the Space's queue for the endpoint now: its last
	// report, less what it worked off since (estimated).
	SpaceQueue float64 `json:"spaceQueue"`
	// ProcessTime is the average run time, seconds: the larger of the
	// Space's own figure and the one measured on our calls; 0 unknown.
	ProcessTime float64 `json:"processTimeSeconds"`
	// Concurrency is the most of our calls seen running there at once.
	Concurrency int `json:"effectiveConcurrency"`
	Running     int `json:"running"` // our calls running there now
	Queued      int `json:"queued"`  // our calls in its queue now
}

// capacityStats fills the Space fields of rs.
func (r *replica) capacityStats(rs *ReplicaStats, now time.Time, fallback func(string) time.Duration) {
	rs.SpaceETA = r.expected("", now, fallback).Seconds()
	r.cap.mu.Lock()
	defer r.cap.mu.Unlock()
	names := make([]string, 0, len(r.cap.eps))
	for name := range r.cap.eps {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		e := r.cap.eps[name]
		avg := e.processTime()
		known := avg
		if avg == 0 {
			avg = fallback(name)
		}
		q := e.spaceQueue(now, avg)
		if rs.Endpoints == nil {
			rs.Endpoints = map[string]EndpointLoad{}
		}
		rs.Endpoints[name] = EndpointLoad{
			SpaceQueue:  math.Round(q*10) / 10,
			ProcessTime: known.Seconds(),
			Concurrency: e.concurrency,
			Running:     e.running,
			Queued:      e.queued,
		}
		rs.SpaceQueue += int(math.Round(q))
	}
}
