package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool/assign"
	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// Pool routes calls of many users to several replicas of one Gradio app,
// each with its own pool of warm sessions. It is safe for concurrent use.
type Pool struct {
	cfg settings
	// set is the replica list; Reconfigure replaces it (never changes it
	// in place), so a caller may keep using the one it loaded.
	set atomic.Pointer[replicaSet]
	// live holds the settings Reconfigure changes (see reload.go).
	live     atomic.Pointer[liveSettings]
	reconfMu sync.Mutex // one Reconfigure at a time, and none during Close
	store    assign.Store
	ownStore *assign.Memory // non-nil when the Pool created (and closes) the store
	users    userHasher     // e-mail -> user key, under Config.HashKey
	sticky   *stickyTable   // nil unless Config.StickySessions
	spread   *userSpread    // signed-in users seen per replica (spread.go)
	parking  parking        // callers waiting for a parked replica's wake (parked.go)
	// stateLost counts sticky users moved off the replica holding their
	// own session (EventStateLost).
	stateLost atomic.Uint64

	rrNew, rrAnon, rrMove atomic.Uint64 // round-robin counters

	// Operator controls by replica name (control.go): replaced, never
	// changed in place; nil until the first.
	ctlMap atomic.Pointer[map[string]Control]
	ctlMu  sync.Mutex // one SetControl at a time

	initOnce     sync.Once
	initialized  atomic.Bool
	checkStarted atomic.Bool // CheckReplicas was called

	ctx    context.Context // lives until Close: connects and background work
	cancel context.CancelFunc
	wg     sync.WaitGroup // background goroutines

	bgMu      sync.Mutex // guards bgStopped and orders wg.Add before Close's wg.Wait
	bgStopped bool

	closeOnce sync.Once
	closed    atomic.Bool
	closeErr  error
}

// New validates cfg and returns a Pool. It connects nothing: the first
// Acquire (or Warm) initialises every replica in parallel.
func New(cfg Config) (*Pool, error) {
	if err := checkReplicas(cfg); err != nil {
		return nil, err
	}
	switch cfg.Routing {
	case "", RouteExpectedTime, RouteLeastInUse:
	default:
		return nil, fmt.Errorf("pool: Routing %q, want %s or %s", cfg.Routing, RouteExpectedTime, RouteLeastInUse)
	}
	p := &Pool{cfg: cfg.withDefaults()}
	p.live.Store(p.cfg.liveSettings())
	p.users = newUserHasher(cfg.HashKey)
	p.store = cfg.Store
	if p.store == nil {
		p.ownStore = assign.NewMemory(assign.MemoryConfig{MaxEntries: p.cfg.MaxUserAssignments})
		p.store = p.ownStore
	}
	if cfg.StickySessions {
		p.sticky = newStickyTable(p)
	}
	p.spread = newUserSpread(p.cfg.UserAssignmentTTL)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	names := uniqueNames(cfg.Replicas)
	set := &replicaSet{byName: map[string]*replica{}}
	for i, src := range cfg.Replicas {
		r, err := newReplica(p, strings.TrimSpace(src), names[i], p.live.Load())
		if err != nil {
			p.cancel()
			for _, r := range set.list {
				_ = r.close(context.Background())
			}
			if p.ownStore != nil {
				_ = p.ownStore.Close()
			}
			return nil, fmt.Errorf("pool: replica %s: %w", names[i], err)
		}
		set.add(r)
	}
	p.set.Store(set)
	if p.sticky != nil {
		p.goBackground(p.sticky.sweepLoop)
	}
	if p.cfg.ProbeInterval > 0 {
		p.goBackground(p.probeLoop)
	}
	if p.cfg.LivenessInterval > 0 {
		p.goBackground(p.livenessLoop)
	}
	if cfg.WarmUp {
		p.Warm()
	}
	return p, nil
}

// now is the pool's clock (time.Now; a test's own in unit tests).
func (p *Pool) now() time.Time { return p.cfg.clock() }

// goBackground runs f on a goroutine that Close waits for; after Close it
// does nothing and reports false.
func (p *Pool) goBackground(f func()) (started bool) {
	p.bgMu.Lock()
	defer p.bgMu.Unlock()
	if p.bgStopped {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
	return true
}

// UsersEvicted is how many users the pool forgot for MaxUserAssignments:
// assignments evicted from its own store and, with StickySessions, users'
// own sessions closed to make room.
func (p *Pool) UsersEvicted() uint64 {
	var n uint64
	if p.ownStore != nil {
		n = p.ownStore.Evicted()
	}
	if p.sticky != nil {
		n += p.sticky.evicted.Load()
	}
	return n
}

// UserTag is how the pool's logs and events name user: the first 8 hex
// digits of its keyed hash ("" for anonymous). A gateway logs the same tag,
// so the lines of one call match without a second hash or key.
func (p *Pool) UserTag(user string) string { return p.users.tag(user) }

// Replicas returns the replica names in configuration order.
func (p *Pool) Replicas() []string {
	return names(p.set.Load().list)
}

func names(list []*replica) []string {
	out := make([]string, len(list))
	for i, r := range list {
		out[i] = r.name
	}
	return out
}

// Warm initialises the pool now instead of at the first Acquire: every
// replica connects and starts creating its MinConnections sessions in the
// background. It does not wait.
func (p *Pool) Warm() {
	if !p.closed.Load() {
		p.init()
	}
}

// init is the lazy initialisation, at the first call unless Config.WarmUp:
// connect every replica and warm its minimum, in parallel, in the
// background.
func (p *Pool) init() {
	p.initOnce.Do(func() {
		p.initialized.Store(true)
		p.emit(Event{Kind: EventInitialized})
		for _, r := range p.set.Load().list {
			p.warmReplica(r)
		}
	})
}

// Ready reports whether at least one replica can serve calls now: its app
// connected (by a call, Warm or CheckReplicas), not ejected, not suspect,
// and, if it was unreachable, connected again since. Before any connect it
// is false. It changes only when a replica's state does (see replica.ready).
func (p *Pool) Ready() bool {
	if p.closed.Load() {
		return false
	}
	for _, r := range p.set.Load().list {
		if r.ready() && r.held() == nil {
			return true
		}
	}
	return false
}

// storeTimeout bounds each assignment-store operation of a call, so that a
// slow shared store delays routing by at most that much: a failed Get routes
// the user as new, a failed Set is logged.
const storeTimeout = 2 * time.Second

// Lease is a session of one replica lent to one caller. Release it when the
// call is done; MarkBroken it instead when the connection failed.
type Lease struct {
	p      *Pool
	r      *replica
	sess   *sessionpool.Session[*gradio.Client]
	client *gradio.Client
	res    *reservation // sticky sessions: the user's own session
	// ownClient: client is a session made for this lease alone (see
	// plainLease), closed when the lease ends.
	ownClient bool
	permit    Permit // from Config.Limiter; nil without one
	key       string // user key ("" anonymous), for events
	route     string // routeOf the acquiring context, for events
	done      atomic.Bool
}

// Client returns the Gradio session to call. It must not be used after
// Release or MarkBroken. Unless the lease is a sticky user's own session
// (Config.StickySessions), it is a session hash no other caller has used,
// so gr.State starts empty: one caller never sees another's state.
func (l *Lease) Client() *gradio.Client { return l.client }

func (l *Lease) keyForEvents() string { return l.key }

// Release returns the session to its pool (or, with StickySessions, to the
// user's reservation). Calling it again, or after MarkBroken, does nothing.
func (l *Lease) Release() {
	if l.done.Swap(true) {
		return
	}
	l.sess.Release()
	if l.res != nil {
		l.p.sticky.release(l.res, false)
	}
	if l.permit != nil {
		l.permit.Release()
	}
	l.closeOwnClient()
}

// MarkBroken ends the lease like Release but destroys the session (its
// connection failed); the pool replaces it in the background. With
// StickySessions the user's own session is dropped too (its gr.State is
// lost). Calling it after Release does nothing.
func (l *Lease) MarkBroken() {
	if l.done.Swap(true) {
		return
	}
	l.sess.Destroy()
	if l.res != nil {
		l.p.sticky.release(l.res, true)
	}
	if l.permit != nil {
		l.permit.Release()
	}
	l.closeOwnClient()
}

// closeOwnClient ends the lease's own session before Release returns, so
// no state or stream of it outlives the lease. It runs after the slot and
// permit are given back: the next caller gets a session hash of its own
// anyway, and need not wait for this one's streams to end.
func (l *Lease) closeOwnClient() {
	if l.ownClient {
		_ = l.client.Close()
	}
}

// closeOwnClientLater hands the lease's own session to a background close.
// A join that may still be accepted runs on in that session (if the app
// accepted it after all, the session cancels it), and closing the session
// waits for that join: the caller must not wait with it.
func (l *Lease) closeOwnClientLater() {
	if !l.ownClient {
		return
	}
	l.ownClient = false
	c := l.client
	if !l.p.goBackground(func() { _ = c.Close() }) {
		_ = c.Close()
	}
}

// Acquire returns a session for user (an e-mail; "" for anonymous): the
// Go form of the seed's getGradioClient(email). It initialises the pool on
// first use, picks the user's replica (see the package documentation), and
// waits in that replica's FIFO queue up to Config.QueueTimeout.
//
// Errors: ctx's error; *ReplicaError wrapping ErrQueueTimeout;
// *AllReplicasFailedError when no replica could serve; ErrClosed.
func (p *Pool) Acquire(ctx context.Context, user string) (*Lease, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	p.init()
	return p.acquire(ctx, acquireOpts{key: p.users.hash(user)})
}

// acquireFunc acquires a session for user, calls f with its client and
// releases it whatever f returns; when f's error shows a lost connection
// (*gradio.ConnectionLostError, gradio.ErrClosed) the session is destroyed
// instead. It returns Acquire's error or f's.
func (p *Pool) acquireFunc(ctx context.Context, user string, f func(*gradio.Client) error) error {
	l, err := p.Acquire(ctx, user)
	if err != nil {
		return err
	}
	err = f(l.Client())
	var lost *gradio.ConnectionLostError
	if errors.As(err, &lost) || errors.Is(err, gradio.ErrClosed) {
		l.MarkBroken()
	} else {
		l.Release()
	}
	return err
}

// acquireOn takes a permit of Config.Limiter (if any), then a session of
// r for key.
func (p *Pool) acquireOn(ctx context.Context, r *replica, key string, prio Priority) (*Lease, error) {
	if p.sticky == nil || key == "" {
		return p.plainLease(ctx, r, key, prio)
	}
	ctx = watchOn(ctx, r) // a sticky user's wait for a permit; for its own session: reservation.watch
	permit, err := p.takePermit(ctx, r, prio)
	if err != nil {
		return nil, err
	}
	l, err := p.sticky.acquire(ctx, r, key, prio)
	if err != nil {
		if permit != nil {
			permit.Release()
		}
		return nil, err
	}
	l.permit = permit
	return l, nil
}

// pin records (and refreshes) the user's assignment to r.
func (p *Pool) pin(ctx context.Context, key string, r, assigned *replica, why string) {
	ttl := p.cfg.UserAssignmentTTL
	if ttl < 0 {
		ttl = 0 // never expires
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	err := p.store.Set(sctx, key, r.name, ttl)
	cancel()
	p.spread.note(key, r.name, time.Now())
	if assigned != r || err != nil {
		e := Event{Kind: eventAssigned, Replica: r.name, User: keyPrefix(key), Err: err}
		if assigned != nil && assigned != r {
			e.Previous, e.Reason = assigned.name, why
		}
		p.emit(e)
	}
}

// order lists the replicas to try for key, best first: the assigned one
// (or, with RebalanceFactor, a much quicker one); for a new user the next
// in round robin; for anonymous users the one where the call is expected
// to complete first (see Routing; endpoint "" weighs every endpoint). The
// rest follow in round robin.
func (p *Pool) order(endpoint, key string, assigned *replica) []*replica {
	list := p.set.Load().list
	n := len(list)
	var first *replica
	switch {
	case assigned != nil:
		first = p.rebalanced(list, endpoint, assigned)
		if first == assigned {
			first = p.moveBack(list, key, assigned)
		}
	case key != "":
		if first = p.newUserSpread(list); first == nil {
			first = p.newUserFirst(list)
		}
	default:
		first = p.anonymousFirst(list, endpoint)
	}
	out := make([]*replica, 0, n+1)
	out = append(out, first)
	// The others follow from a rotating start, so that the callers moved
	// off a failed replica spread over the rest (round robin) instead of
	// all landing on the one after it; replicas whose connect stalls come
	// last (a move waits for no trickled /config while another is ready).
	next := int(p.rrMove.Add(1)-1) % n
	now := time.Now()
	var stalled []*replica
	for i := range n {
		r := list[(next+i)%n]
		switch {
		case r == first:
		case r.connectStalled(now, p.cfg.stalledConnect):
			stalled = append(stalled, r)
		default:
			out = append(out, r)
		}
	}
	return append(out, stalled...)
}

// newUserFirst is the replica a new signed-in user is assigned to: the
// next in round robin, skipping a replica whose connect stalls (see
// connectStalled) while another is connected. The user would wait for
// that connect, and a replica that trickles its /config holds it up to the
// header time-out (issue 20 "Why" 8), then stays the user's replica.
func (p *Pool) newUserFirst(list []*replica) *replica {
	n := len(list)
	start := int(p.rrNew.Add(1)-1) % n
	now := time.Now()
	first := list[start]
	if !first.connectStalled(now, p.cfg.stalledConnect) || !anyConnected(list, now) {
		return first
	}
	for i := 1; i < n; i++ {
		if r := list[(start+i)%n]; r.usable(now) && !r.connectStalled(now, p.cfg.stalledConnect) {
			return r
		}
	}
	return first
}

// leastLoaded returns the index of the usable replica with the fewest calls
// in use plus waiting (a full scan); ties go round robin.
func (p *Pool) leastLoaded(list []*replica) *replica {
	n := len(list)
	start := int(p.rrAnon.Add(1)-1) % n
	now := time.Now()
	best, bestLoad := list[start], -1
	for tier, r := range candidates(list, start, now) {
		if tier > 0 && bestLoad >= 0 {
			break
		}
		st := r.sp.Stat()
		load := st.InUse + st.Waiting + int(r.stickyWaiting.Load()) + p.limiterWaiting(r)
		if bestLoad < 0 || load < bestLoad {
			best, bestLoad = r, load
		}
	}
	return best
}

// Close stops the pool: waiters get an error, idle sessions are closed,
// sessions in use are closed when released or when ctx ends. It waits for
// background work. Calling it again returns the first result.
func (p *Pool) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.reconfMu.Lock() // no Reconfigure adds replicas from here on
		p.closed.Store(true)
		p.reconfMu.Unlock()
		p.cancel() // replicas being drained after a Reconfigure close now
		var errs []error
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, r := range p.set.Load().list {
			wg.Go(func() {
				if err := r.close(ctx); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("replica %s: %w", r.name, err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if p.sticky != nil {
			p.sticky.closeAll()
		}
		p.bgMu.Lock()
		p.bgStopped = true
		p.bgMu.Unlock()
		p.wg.Wait()
		if p.ownStore != nil {
			_ = p.ownStore.Close()
		}
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}
