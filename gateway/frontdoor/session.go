package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/internal/logattr"
	"github.com/gradiopool/gradiopool/pool"
)

// binding is what ties a caller's session to a replica: the part of a
// session that several gateway instances would share.
type binding struct {
	// Replica is the pool's name of the replica ("" until the first join).
	Replica string `json:"replica"`
	// Backend is the session hash the gateway uses at that replica.
	Backend string `json:"backend"`
	// Owner is the keyed hash of the credentials that created the session.
	Owner string `json:"owner"`
}

// callerSession is this instance's live view of a caller session.
type callerSession struct {
	front  string
	f      *FrontDoor
	client string // Config.ClientID of its creator: its session limit

	mu   sync.Mutex // guards the fields below; no I/O under it
	bind binding
	// calls are the calls in flight (accepted by a replica, or run by
	// the bridge), by the replica's event id (the bridge's own for a
	// bridged call).
	calls map[string]*call
	// early holds the event ids whose process_completed passed before their
	// join's answer was handled (the replica ran the call at once and its
	// stream was open): addPending then frees the slot at once.
	early    map[string]string // event id -> its end's code (see CallEnd)
	accepted int               // calls the current replica accepted (state may exist there)
	streams  int               // open data and heartbeat streams
	readers  int               // open data streams (ReadGrace)
	// lanes maps each replica the session's calls ran on to the backend
	// session hash there (bind's replica to bind.Backend): a spread call
	// (see Spreadable) runs on another replica than bind's.
	lanes map[string]string
	// wake gets a token when a call is added, so that an open data stream
	// starts relaying the call's replica if it does not yet.
	wake     chan struct{}
	lastSeen time.Time
	// br is the session's bridge (bridge.go) once a call of it ran on an
	// older replica (mixed.go).
	br *bridgeState

	// queued holds the calls answered with the gateway's event id
	// (queued.go), by that id, until they end (those accepted are in
	// calls too, under the replica's event id).
	queued map[string]*call
	// changed (on mu) is broadcast as the join of each call ends (see
	// frontIDs) and as a data stream opens (awaitReader).
	changed *sync.Cond
	// closingStream is open while a stream of s wrote close_stream and
	// its caller has not let go of it yet (closing, awaitClosed).
	closingStream chan struct{}
	closingN      int // the streams of s closing now (closeIfDrained, closed)
	// handling counts the joins of s being handled (from their arrival to
	// their answer): its stream does not close under them (streamDrained).
	handling int
	// overlapAt is when s last had two calls in flight at once (see
	// holdsLastCompletion).
	overlapAt time.Time
}

// session returns the live session for front, creating it when create is
// set; nil when unknown or when owner differs (another caller's session is
// treated as unknown, never reached), or past a session limit.
func (f *FrontDoor) session(ctx context.Context, front, owner string, create bool) *callerSession {
	s, _ := f.sessionFor(ctx, front, owner, "", create)
	return s
}

// sessionLimitError is a new caller session refused by a limit:
// Config.MaxSessionsPerClient (PerClient) or Config.MaxSessions.
type sessionLimitError struct {
	PerClient bool
	Max       int
}

func (e *sessionLimitError) Error() string {
	if e.PerClient {
		return fmt.Sprintf("gradiopool: this client has %d front-door sessions already (frontdoor.max_sessions_per_client); close one or wait for it to expire", e.Max)
	}
	return fmt.Sprintf("gradiopool: the gateway holds %d front-door sessions (frontdoor.max_sessions); retry later", e.Max)
}

// sessionFor is session for a caller that client names (Config.ClientID):
// a new session counts toward the client's and the total limits, and past
// either the answer is a *sessionLimitError.
func (f *FrontDoor) sessionFor(ctx context.Context, front, owner, client string, create bool) (*callerSession, error) {
	now := f.conf().Now()
	f.mu.Lock()
	s := f.sessions[front]
	f.mu.Unlock()
	if s == nil {
		if !create {
			return nil, nil
		}
		b := binding{Owner: owner}
		ns := &callerSession{front: front, f: f, client: client, bind: b, calls: map[string]*call{}, lastSeen: now, wake: make(chan struct{}, 1)}
		if b.Replica != "" {
			ns.lanes = map[string]string{b.Replica: b.Backend}
		}
		f.start()
		f.mu.Lock()
		if s = f.sessions[front]; s == nil {
			var evicted []*callerSession
			if f.conf().MaxSessions > 0 && len(f.sessions) >= f.conf().MaxSessions {
				evicted = f.evictIdleLocked("", now)
			}
			if f.conf().MaxSessionsPerClient > 0 && f.perClient[client] >= f.conf().MaxSessionsPerClient {
				evicted = append(evicted, f.evictIdleLocked(client, now)...)
			}
			switch {
			case f.conf().MaxSessions > 0 && len(f.sessions) >= f.conf().MaxSessions:
				f.mu.Unlock()
				f.stats.sessionsRefused.Add(1)
				return nil, &sessionLimitError{Max: f.conf().MaxSessions}
			case f.conf().MaxSessionsPerClient > 0 && f.perClient[client] >= f.conf().MaxSessionsPerClient:
				f.mu.Unlock()
				f.stats.sessionsRefused.Add(1)
				return nil, &sessionLimitError{PerClient: true, Max: f.conf().MaxSessionsPerClient}
			}
			defer f.endEvicted(evicted)
			s = ns
			f.sessions[front] = s
			f.perClient[client]++
			f.stats.created.Add(1)
		}
		f.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bind.Owner != owner {
		return nil, nil
	}
	s.lastSeen = now
	return s, nil
}

// sessionLiveFor is how long after its last request a session with no
// stream and no call counts toward the session caps: past it, a new
// session that finds a cap reached takes its place (evictIdleLocked), so
// that a burst of sessions from one client (or everyone behind one
// address: a web app on the gateway's host) locks out that client's new
// sessions for about this long, not for session_ttl.
const sessionLiveFor = time.Minute

// evictIdleLocked forgets the sessions of client ("" every client) that
// have no stream, no call in flight or waiting, and no request for
// sessionLiveFor; f.mu is held. Their ends (releaseAll) are the caller's,
// outside f.mu (endEvicted).
func (f *FrontDoor) evictIdleLocked(client string, now time.Time) []*callerSession {
	var out []*callerSession
	for k, s := range f.sessions {
		if client != "" && s.client != client {
			continue
		}
		s.mu.Lock()
		idle := s.streams == 0 && len(s.calls) == 0 && len(s.queued) == 0 && now.Sub(s.lastSeen) >= sessionLiveFor
		s.mu.Unlock()
		if idle {
			f.forgetLocked(k, s)
			out = append(out, s)
		}
	}
	return out
}

// endEvicted ends the sessions evictIdleLocked took out.
func (f *FrontDoor) endEvicted(evicted []*callerSession) {
	for _, s := range evicted {
		s.releaseAll(codeExpired)
		f.stats.expired.Add(1)
	}
	if len(evicted) > 0 {
		f.log.Info("front door: idle sessions made room for new ones at a session cap", slog.Int("sessions", len(evicted)))
	}
}

// forgetLocked removes session key from the maps; f.mu is held.
func (f *FrontDoor) forgetLocked(key string, s *callerSession) {
	delete(f.sessions, key)
	if f.perClient[s.client]--; f.perClient[s.client] <= 0 {
		delete(f.perClient, s.client)
	}
}

// sessionRefused answers a session limit in Gradio's shape: 429 past the
// client's own limit, 503 past the total, both with Retry-After.
func sessionRefused(w http.ResponseWriter, err error) {
	var le *sessionLimitError
	if !errors.As(err, &le) {
		detail(w, http.StatusInternalServerError, "gradiopool: "+err.Error())
		return
	}
	status := http.StatusServiceUnavailable
	if le.PerClient {
		status = http.StatusTooManyRequests
	}
	w.Header().Set("Retry-After", "60")
	detail(w, status, le.Error())
}

// binding returns the current binding.
func (s *callerSession) binding() binding {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bind
}

// rebind binds s to replica (a new backend session there, unless s ran
// calls there before) if its binding is still was: the first join, or a
// move. Otherwise (another join bound or moved it meanwhile) it returns
// the binding now and false. hadState: s left a replica that had
// accepted its calls.
func (s *callerSession) rebind(was binding, replica string) (now binding, hadState, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bind != was {
		return s.bind, false, false
	}
	hadState = was.Replica != "" && s.accepted > 0
	s.bindLocked(binding{Replica: replica, Backend: s.laneBackendLocked(replica), Owner: was.Owner})
	return s.bind, hadState, true
}

// bindLocked makes b the session's binding here; s.mu is held.
func (s *callerSession) bindLocked(b binding) {
	s.bind = b
	s.accepted = 0
	if s.lanes == nil {
		s.lanes = map[string]string{}
	}
	s.lanes[b.Replica] = b.Backend
}

// maxEarly bounds the early completions a session remembers.
const maxEarly = 256

// call is one call of a caller session, from its join's arrival to its
// end: what the front door reports of it (CallEnd), where it runs, and
// how its caller knows it.
//
// Its life (state): waiting, for a slot or the first replica (in
// s.queued under gatewayID once its caller was told it waits in the
// gateway's queue); joining, its join on the way to a replica (a shown
// call's messages then wait for its ids: frontIDs); accepted, in s.calls
// under the replica's event id, holding its slot; ended, taken out of
// s.calls and reported once (a shown call that no replica took keeps its
// entry in s.queued until its final message is written). Admission may
// end it before a replica accepts it, with an answer's end code
// (settle).
//
// Ownership: the goroutine handling its join writes the placement fields
// (replica to slot) until addPending records it accepted, under s.mu;
// from then on they are read under s.mu only. The fields marked so are
// guarded by s.mu throughout.
type call struct {
	state callState // s.mu

	// Set at the join's arrival.
	endpoint, user string
	start          time.Time
	// release ends the call's count against its client's limit
	// (Config.BeginCall); idempotent; nil: not counted.
	release func()
	// kept is set once the call's slot is kept past its join (accepted):
	// the join's handler then leaves release to the call's end.
	kept atomic.Bool

	// Placement: the replica and backend session hash it runs under,
	// whether it was spread (it left no state on the session's replica),
	// how it travels (via: relayed or bridged), how long it waited, and
	// its slot (nil: a bridged call's, held by its job).
	replica, backend string
	spread           bool
	via              transport
	wait             time.Duration
	slot             *pool.Slot
	grace            *time.Timer // s.mu: ends it if nobody reads it (Config.ReadGrace)

	// The call's wait in the gateway's queue (queued.go); zero when its
	// join was not run so. watch is the wait shown to the caller (nil:
	// not shown); gatewayID is the event id the caller knows it by once
	// told it waits (isShown); cancel ends the wait.
	watch     *joinWatch
	gatewayID string
	cancel    context.CancelFunc
	// told is decided once, by whichever comes first: the caller is told
	// the gateway's event id (toldGateway: the call waited), or its join
	// goes to a replica first (toldReplica: the caller gets the replica's
	// answer and id).
	told atomic.Int32
	// s.mu: est is the latest estimation not yet written to the caller's
	// stream (only the latest is kept, however fast the queue moves);
	// final the call's process_completed when it ended without a replica
	// accepting it (the entry goes once it is written); replicaID the
	// replica's event id once a replica accepted it; answered when the
	// caller was told the gateway's event id (its read grace counts from
	// then, not from the replica's accept).
	est, final []byte
	replicaID  string
	answered   time.Time
}

// callState is where a call is in its life (see call).
type callState int8

const (
	callWaiting callState = iota
	callJoining
	callAccepted
	callEnded
)

// addPending records c accepted under replica event id eventID, holding
// l (or frees l at once when the call already completed).
func (s *callerSession) addPending(eventID string, l *pool.Slot, c *call) {
	s.mu.Lock()
	if !c.spread {
		s.accepted++
	}
	s.poke()
	if code, ok := s.early[eventID]; ok {
		delete(s.early, eventID)
		c.state = callEnded
		s.mu.Unlock()
		l.Release()
		s.f.reportCall(c, code)
		return
	}
	c.kept.Store(true)
	c.state, c.slot = callAccepted, l
	if c.isShown() {
		c.replicaID, c.est = eventID, nil
	}
	s.calls[eventID] = c
	if len(s.calls) > 1 {
		s.overlapAt = s.f.conf().Now()
	}
	if g := s.f.conf().ReadGrace; g > 0 {
		if !c.answered.IsZero() {
			g = max(g-s.f.conf().Now().Sub(c.answered), 0)
		}
		c.grace = time.AfterFunc(g, func() { s.graceOver(eventID) })
	}
	s.mu.Unlock()
}

// graceOver ends a call whose ReadGrace passed when no data stream of its
// session is open: nobody reads its messages, so it would hold its slot
// for as long as the session lives (a heartbeat stream keeps a session
// alive for ever). It is cancelled at the replica and its slot freed.
func (s *callerSession) graceOver(eventID string) {
	s.mu.Lock()
	c := s.calls[eventID]
	unread := c != nil && s.readers == 0
	b := s.bind
	if c != nil && c.backend != "" { // the call's own replica (a spread call's is not bind's)
		b.Replica, b.Backend = c.replica, c.backend
	}
	s.mu.Unlock()
	if !unread || s.f.ctx.Err() != nil {
		return
	}
	if !s.complete(eventID, codeNotRead) {
		return // ended meanwhile
	}
	s.f.stats.notRead.Add(1)
	s.f.log.Info("front door: call cancelled, its caller opened no data stream within the grace",
		slog.String("replica", b.Replica), slog.String("session", shortHash(s.front)),
		slog.String("endpoint", c.endpoint), logattr.Ms("grace", s.f.conf().ReadGrace))
	c.via.takeBack(s, c, b, eventID)
}

// unread reports whether no data stream of s is open.
func (s *callerSession) unread() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readers == 0
}

// awaitReader waits until a data stream of s is open, shown to the
// caller as a wait in the gateway's queue (watch: the join is answered
// with the gateway's event id, and its read grace ends the wait); false
// when ctx ended first.
func (s *callerSession) awaitReader(ctx context.Context, watch *joinWatch) bool {
	if !s.unread() {
		return true
	}
	watch.queued(func() pool.QueuePosition { return pool.QueuePosition{Size: 1} }, true)
	defer watch.left()
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.changedLocked().Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.readers == 0 && ctx.Err() == nil {
		s.changedLocked().Wait()
	}
	return s.readers > 0
}

// takeLocked forgets call id and stops its grace; s.mu is held.
func (s *callerSession) takeLocked(id string) *call {
	c := s.calls[id]
	if c == nil {
		return nil
	}
	delete(s.calls, id)
	c.state = callEnded
	if c.isShown() {
		delete(s.queued, c.gatewayID) // it ended: its entry in the gateway's queue too
	}
	if c.grace != nil {
		c.grace.Stop()
	}
	return c
}

// complete releases the slot of a call that ended; false when this
// instance does not hold it (its join's answer has not been handled yet:
// such an early completion is remembered for addPending).
//
// code is how it ended, for Config.OnCall (see CallEnd.Code).
func (s *callerSession) complete(eventID, code string) bool {
	s.mu.Lock()
	c := s.takeLocked(eventID)
	if c == nil {
		if s.early == nil || len(s.early) >= maxEarly {
			s.early = map[string]string{}
		}
		s.early[eventID] = code
	}
	s.mu.Unlock()
	if c == nil {
		return false
	}
	if c.slot != nil {
		c.slot.Release()
	}
	s.f.reportCall(c, code)
	return true
}

// observe feeds a relayed message of call eventID to its slot's
// per-endpoint figures (queue, run time, concurrency_limited).
func (s *callerSession) observe(eventID string, data []byte) {
	s.mu.Lock()
	c := s.calls[eventID]
	s.mu.Unlock()
	if c != nil && c.slot != nil {
		c.slot.Observe(data)
	}
}

// laneBackend returns the backend session hash of s at replica, making
// one for a replica it has not used yet.
func (s *callerSession) laneBackend(replica string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.laneBackendLocked(replica)
}

// laneBackendLocked is laneBackend with s.mu held.
func (s *callerSession) laneBackendLocked(replica string) string {
	if be, ok := s.lanes[replica]; ok {
		return be
	}
	if s.lanes == nil {
		s.lanes = map[string]string{}
	}
	be := newBackendHash()
	s.lanes[replica] = be
	return be
}

// busyLanes returns replica -> backend session hash of the replicas
// running calls of s now.
func (s *callerSession) busyLanes() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for _, c := range s.calls {
		if c.replica != "" && c.via.laned() {
			out[c.replica] = c.backend
		}
	}
	return out
}

// callsOn returns the event ids of the calls in flight on replica (""
// any replica); laned keeps only those its replica's queue/data stream
// carries (relayed, not bridged).
func (s *callerSession) callsOn(replica string, laned bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, c := range s.calls {
		if (replica == "" || c.replica == replica) && (!laned || c.via.laned()) {
			ids = append(ids, id)
		}
	}
	return ids
}

// laneOf returns the replica and backend session hash of call eventID,
// or s's binding when the call is not known here.
func (s *callerSession) laneOf(eventID string) (replica, backend string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.calls[eventID]; c != nil && c.replica != "" {
		return c.replica, c.backend
	}
	return s.bind.Replica, s.bind.Backend
}

// releaseAll releases every slot (the calls' stream is gone: the replica
// dropped them, or the session expired) and returns how many.
//
// code is how the calls ended, for Config.OnCall.
func (s *callerSession) releaseAll(code string) int {
	s.cancelQueued()
	s.mu.Lock()
	var ended []*call
	for id := range s.calls {
		ended = append(ended, s.takeLocked(id))
	}
	br := s.br
	s.mu.Unlock()
	if br != nil {
		br.close()
	}
	s.endCalls(ended, code)
	return len(ended)
}

// endCalls frees the slots of calls taken out of s and reports their end.
func (s *callerSession) endCalls(ended []*call, code string) {
	for _, c := range ended {
		if c.slot != nil {
			c.slot.Release()
		}
		s.f.reportCall(c, code)
	}
}

// stream counts an open stream (a data stream when data: its messages
// are read, see ReadGrace; else a heartbeat) until the returned func runs.
func (s *callerSession) stream(data bool) func() {
	s.mu.Lock()
	s.streams++
	if data {
		s.readers++
		s.changedLocked().Broadcast()
	}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.streams--
		if data {
			s.readers--
		}
		s.lastSeen = s.f.conf().Now()
		s.mu.Unlock()
	}
}
