package pool

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/waitq"
)

// stickyTable holds the users' own sessions when Config.StickySessions is
// on. A reservation is a Gradio session (session hash) of one replica that
// only its user calls through, so gr.State survives between calls. The
// user's calls still take a slot of the replica's session pool, so
// MaxConnections and the FIFO queue keep bounding the replica's load; the
// slot's own session is simply not used meanwhile.
type stickyTable struct {
	p  *Pool
	mu sync.Mutex // guards m, left and each reservation's lastUsed and dead
	m  map[string]*reservation
	// left are the users whose reservation was dropped with its replica
	// (removed, restarted): their next call, elsewhere or on the app
	// started again, finds their gr.State gone, and is counted then
	// (EventStateLost). Swept with the reservations.
	left map[string]leftState
	// evicted counts the reservations dropped for MaxUserAssignments.
	evicted atomic.Uint64
}

type leftState struct {
	replica string
	at      time.Time
}

type reservation struct {
	key string
	r   *replica
	// token holds one value while the session is free: a call takes it,
	// so the user's calls run one at a time.
	token chan struct{}
	// client and gen are owned by whoever holds the token.
	client *gradio.Client
	gen    uint64

	lastUsed time.Time // guarded by stickyTable.mu
	dead     bool      // guarded by stickyTable.mu: dropped from the table

	// waiters are the user's calls waiting for the token whose callers
	// watch their place (CallOptions.Watch), in arrival order (wmu).
	wmu     sync.Mutex
	waiters waitq.Queue[struct{}]
}

func newStickyTable(p *Pool) *stickyTable {
	return &stickyTable{p: p, m: map[string]*reservation{}, left: map[string]leftState{}}
}

// get returns key's reservation on r, replacing one on another replica.
func (t *stickyTable) get(key string, r *replica) *reservation {
	res, lost := t.getLocking(key, r)
	if lost != "" {
		// The user moves (their replica was removed, drained or failed),
		// or their replica's app restarted: their gr.State is gone. Never
		// an error: counted and logged.
		t.p.stateLost.Add(1)
		t.p.emit(Event{Kind: EventStateLost, Replica: r.name, Previous: lost, User: keyPrefix(key)})
	}
	return res
}

// getLocking is get under t.mu; lost names the replica of the user's
// state that is gone, if any: a reservation it replaced, or one dropped
// with its replica.
func (t *stickyTable) getLocking(key string, r *replica) (_ *reservation, lost string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	res := t.m[key]
	if res != nil && res.r == r {
		return res, ""
	}
	if res != nil {
		t.dropLocked(res)
		lost = res.r.name
	} else if l, ok := t.left[key]; ok {
		lost = l.replica
	}
	if res == nil {
		if limit := t.p.cfg.MaxUserAssignments; limit > 0 && len(t.m) >= limit {
			t.evictLocked()
		}
	}
	delete(t.left, key)
	res = &reservation{key: key, r: r, token: make(chan struct{}, 1), lastUsed: time.Now()}
	res.token <- struct{}{}
	t.m[key] = res
	return res, lost
}

// evictLocked drops the least recently used reservation that no call
// holds, to make room for a new user (MaxUserAssignments). When every one
// is busy none goes: the table then exceeds the bound by at most the
// calls in flight, which the replicas' MaxConnections bound.
// WARNING: t.mu must be held.
func (t *stickyTable) evictLocked() {
	var lru *reservation
	for _, res := range t.m {
		if len(res.token) == 1 && (lru == nil || res.lastUsed.Before(lru.lastUsed)) {
			lru = res
		}
	}
	if lru != nil {
		t.dropLocked(lru)
		t.evicted.Add(1)
	}
}

// dropLocked removes res from the table; its session is closed by whoever
// gets its token next (the sweeper, or a waiter that then sees dead).
// WARNING: t.mu must be held.
func (t *stickyTable) dropLocked(res *reservation) {
	if res.dead {
		return
	}
	res.dead = true
	if t.m[res.key] == res {
		delete(t.m, res.key)
	}
	t.p.goBackground(func() {
		select {
		case <-res.token:
			closeReservation(res)
			res.token <- struct{}{} // wake any other waiter: it sees dead
		case <-t.p.ctx.Done():
		}
	})
}

func closeReservation(res *reservation) {
	if res.client != nil {
		_ = res.client.Close()
		res.client = nil
	}
}

// acquire waits for key's own session on r (while the user's previous call
// runs), then takes a slot of r's pool for the call.
func (t *stickyTable) acquire(ctx context.Context, r *replica, key string, prio Priority) (*Lease, error) {
	qctx := ctx
	if qt := t.p.live.Load().queueTimeout; qt > 0 {
		var cancel context.CancelFunc
		qctx, cancel = context.WithTimeout(ctx, qt)
		defer cancel()
	}
	for {
		res := t.get(key, r)
		r.stickyWaiting.Add(1)
		leave := res.watch(ctx, r)
		select {
		case <-res.token:
			leave()
			r.stickyWaiting.Add(-1)
		case <-qctx.Done():
			leave()
			r.stickyWaiting.Add(-1)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			r.stickyTimeouts.Add(1)
			t.p.emit(Event{Kind: EventQueueTimeout, Replica: r.name, User: keyPrefix(key)})
			return nil, ErrQueueTimeout
		}
		t.mu.Lock()
		dead := res.dead
		t.mu.Unlock()
		if dead {
			res.token <- struct{}{} // let the closer have it
			continue
		}
		s, err := r.acquireSession(ctx, prio)
		if err != nil {
			res.token <- struct{}{}
			return nil, err
		}
		app, gen := r.currentApp()
		if res.client == nil || res.gen != gen {
			closeReservation(res) // from an app generation that is gone
			if app == nil {       // reconnecting: use the slot's session
				app = s.Value()
			}
			res.client, res.gen = app.NewSession(), gen
		}
		return &Lease{p: t.p, r: r, sess: s, client: res.client, res: res, key: key}, nil
	}
}

// watch shows the call's wait for res's token to its QueueWatch, if it
// has one and the token is taken: its rank among the user's calls waiting
// for their session, and an ETA of one slot time per call ahead of it and
// its own turn (the user's calls run one at a time, not MaxConnections at
// a time). It returns what ends the showing.
func (res *reservation) watch(ctx context.Context, r *replica) (leave func()) {
	qw, _ := ctx.Value(queueWatcherKey{}).(*QueueWatch)
	if qw == nil || len(res.token) > 0 {
		return func() {}
	}
	link := new(waitq.Link[struct{}])
	res.wmu.Lock()
	res.waiters.Push(link, waitq.ClassOf(0), 0)
	res.wmu.Unlock()
	qw.queuedAt(func() QueuePosition {
		res.wmu.Lock()
		rank, size := res.waiters.Rank(link, 0), res.waiters.Len()
		res.wmu.Unlock()
		pos := QueuePosition{Replica: r.name, Rank: rank, Size: size}
		if avg, ok := r.slotTimeAvg(); ok {
			pos.ETA, pos.ETAKnown = avg*time.Duration(max(rank, 0)+1), true
		}
		return pos
	})
	return func() {
		qw.left() // before the link goes: pos is not called after
		res.wmu.Lock()
		res.waiters.Remove(link)
		res.wmu.Unlock()
	}
}

// release gives the session back to its user; broken drops it.
func (t *stickyTable) release(res *reservation, broken bool) {
	t.mu.Lock()
	res.lastUsed = time.Now()
	dead := res.dead
	t.mu.Unlock()
	if broken || dead {
		closeReservation(res)
	}
	res.token <- struct{}{}
}

// dropReplica drops every reservation on r (its app restarted: their state
// is gone anyway).
func (t *stickyTable) dropReplica(r *replica) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for _, res := range t.m {
		if res.r == r {
			t.dropLocked(res)
			t.left[res.key] = leftState{replica: r.name, at: now}
		}
	}
}

// has reports whether key holds a session of its own (its gr.State).
func (t *stickyTable) has(key string) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[key] != nil
}

// count returns the reservations per replica.
func (t *stickyTable) count() map[*replica]int {
	out := map[*replica]int{}
	if t == nil {
		return out
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, res := range t.m {
		out[res.r]++
	}
	return out
}

// sweepLoop drops reservations unused for UserAssignmentTTL.
func (t *stickyTable) sweepLoop() {
	ttl := t.p.cfg.UserAssignmentTTL
	if ttl <= 0 {
		return // never expire
	}
	every := min(max(ttl/4, time.Second), time.Minute)
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-t.p.ctx.Done():
			return
		case now := <-tk.C:
			t.mu.Lock()
			for _, res := range t.m {
				if now.Sub(res.lastUsed) >= ttl && len(res.token) == 1 {
					t.dropLocked(res)
				}
			}
			for k, l := range t.left {
				if now.Sub(l.at) >= ttl {
					delete(t.left, k) // the state had expired anyway
				}
			}
			t.mu.Unlock()
		}
	}
}

// closeAll closes every free reservation at Close (busy ones are closed by
// their Release... or with their app's sessions).
func (t *stickyTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, res := range t.m {
		res.dead = true // a busy one is closed by its release
		select {
		case <-res.token:
			closeReservation(res)
			res.token <- struct{}{}
		default:
		}
	}
	t.m = map[string]*reservation{}
}
