package frontdoor

// The gateway's queue across a cluster: a join that waits at one gateway
// (queued.go) is answered there with the gateway's event id, while the
// caller's queue/data stream may reach another gateway behind a plain
// load balancer. The gateway that holds the call shares each change of
// its state (Config.QueueNotes): its place in the queue (an estimation),
// its join on the way to a replica, the replica's event id once accepted,
// or its end without a replica. The gateway serving the stream applies
// them to a "foreign" entry of the same queue (queuedCall.foreign) and
// writes the caller what the holder would have: the estimations, the
// replica's messages under the gateway's event id, the final error.

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"
)

// QueueNotes shares the state of calls waiting in one gateway's queue
// with the other gateways of a cluster (Config.QueueNotes).
// Implementations must be safe for concurrent use.
type QueueNotes interface {
	// Put records n as the latest state of its call, a call of caller
	// session front, kept for ttl, and delivers it to every gateway's
	// [FrontDoor.QueueNoted].
	Put(ctx context.Context, front string, n QueueNote, ttl time.Duration) error
	// Notes returns the latest recorded state of each call of front.
	Notes(ctx context.Context, front string) ([]QueueNote, error)
	// Done forgets the call id of front: its end was written to the
	// caller.
	Done(ctx context.Context, front, id string) error
}

// QueueNote is one state of a call in the gateway's queue (QueueNotes).
type QueueNote struct {
	ID   string `json:"id"`   // the gateway's event id, the caller's
	From string `json:"from"` // the front door that holds the call
	// Owner is the session's owner (Binding.Owner): a gateway that does
	// not know the session yet (not bound when its call had to wait)
	// serves its stream to that owner only.
	Owner string `json:"owner"`
	// Seq grows with each note of the call: an older one is dropped.
	Seq int64 `json:"seq"`
	// Estimation is the Gradio estimation message to show (waiting).
	Estimation json.RawMessage `json:"est,omitempty"`
	// Joining: the call's join is on its way to a replica, whose
	// messages may pass before EventID is known.
	Joining bool `json:"joining,omitempty"`
	// EventID is the replica's event id once Replica accepted the call,
	// run under Backend, the session hash there.
	EventID string `json:"event_id,omitempty"`
	Replica string `json:"replica,omitempty"`
	Backend string `json:"backend,omitempty"`
	// Final is the call's process_completed when it ended without a
	// replica (the gateway's time-out, a refusal, a cancel).
	Final json.RawMessage `json:"final,omitempty"`
}

// Bounds of the shared queue's round trips: a note is on the caller's
// path (its join's answer waits for the first), a slow store must not
// hold it for long.
const (
	noteStoreTime = time.Second
	// foreignJoinWait bounds how long a stream holds a replica's message
	// of a call it does not know while a call of the session is being
	// joined at another gateway (the message may be that call's).
	foreignJoinWait = 2 * time.Second
)

// sharesQueue reports whether this front door shares its queue with other
// gateways (a cluster with Config.QueueNotes).
func (f *FrontDoor) sharesQueue() bool {
	return f.cfg.QueueNotes != nil && f.cfg.OnForeignEnd != nil
}

// shareQueued records a change of local queued call qc of s for the other
// gateways; set fills in the change. Errors are logged: a gateway that
// cannot reach the store shows nothing of the call, as before.
func (s *callerSession) shareQueued(qc *queuedCall, set func(*QueueNote)) {
	f := s.f
	if !f.sharesQueue() || qc == nil {
		return
	}
	qc.shareMu.Lock()
	defer qc.shareMu.Unlock()
	qc.seq++
	n := QueueNote{ID: qc.id, From: f.id, Seq: qc.seq, Owner: s.binding().Owner}
	set(&n)
	ctx, cancel := context.WithTimeout(f.ctx, noteStoreTime)
	defer cancel()
	if err := f.cfg.QueueNotes.Put(ctx, s.front, n, f.cfg.SessionTTL); err != nil && f.ctx.Err() == nil {
		f.log.Debug("front door: could not share a queued call's state with the cluster",
			slog.String("session", shortHash(s.front)), slog.Any("error", err))
	}
}

// QueueNoted applies a note of a call waiting in another gateway's queue
// to caller session front, when a data stream of it is open here (one
// that opens later reads the notes recorded so far). The gateway calls it
// for each note the store delivers.
func (f *FrontDoor) QueueNoted(front string, n QueueNote) {
	if n.From == f.id {
		return
	}
	f.mu.Lock()
	s := f.sessions[front]
	f.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	watched := s.noteStreams > 0
	s.mu.Unlock()
	if watched {
		s.applyNote(n)
	}
}

// sessionFromNotes returns a session of owner unknown here and to the
// store (unbound) whose calls wait in another gateway's queue: its stream
// may reach this gateway first. Nil when there is none.
func (f *FrontDoor) sessionFromNotes(r *http.Request, front, owner string) *callerSession {
	if !f.sharesQueue() {
		return nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), noteStoreTime)
	notes, err := f.cfg.QueueNotes.Notes(ctx, front)
	cancel()
	if err != nil {
		return nil
	}
	for _, n := range notes {
		if n.Owner == owner && n.From != f.id {
			s, _ := f.sessionFor(r.Context(), front, owner, f.clientID(r), true)
			return s
		}
	}
	return nil
}

// learnCall applies, when id is not a call known here, the notes of the
// cluster about it (a cancel reaching a gateway with no stream of the
// session open: its stream's gateway knows the call by its notes, and so
// must this one, to cancel it where it waits or runs). The returned
// func forgets what it learnt unless a stream of the session here takes
// the notes meanwhile.
func (s *callerSession) learnCall(ctx context.Context, id string) (forget func()) {
	forget = func() {
		s.mu.Lock()
		if s.noteStreams == 0 {
			s.dropForeignLocked()
		}
		s.mu.Unlock()
	}
	if !s.f.sharesQueue() || !validHash(id) {
		return func() {}
	}
	s.mu.Lock()
	_, queued := s.queued[id]
	_, pending := s.pending[id]
	s.mu.Unlock()
	if queued || pending {
		return func() {}
	}
	sctx, cancel := context.WithTimeout(ctx, noteStoreTime)
	notes, err := s.f.cfg.QueueNotes.Notes(sctx, s.front)
	cancel()
	if err != nil {
		return func() {}
	}
	for _, n := range notes {
		if n.ID == id && n.From != s.f.id && n.Owner == s.binding().Owner {
			s.applyNote(n)
		}
	}
	return forget
}

// watchQueueNotes makes s take the notes of calls held by other gateways
// while its data stream is open: those recorded so far at once, then each
// as it comes (QueueNoted). The returned func ends it and forgets what
// those gateways account for.
func (s *callerSession) watchQueueNotes(ctx context.Context) (stop func()) {
	f := s.f
	if !f.sharesQueue() {
		return func() {}
	}
	s.mu.Lock()
	s.noteStreams++
	s.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, noteStoreTime)
	notes, err := f.cfg.QueueNotes.Notes(sctx, s.front)
	cancel()
	if err != nil && ctx.Err() == nil {
		f.log.Debug("front door: could not read the cluster's queued calls of a session",
			slog.String("session", shortHash(s.front)), slog.Any("error", err))
	}
	for _, n := range notes {
		if n.From != f.id {
			s.applyNote(n)
		}
	}
	return func() {
		s.mu.Lock()
		s.noteStreams--
		if s.noteStreams == 0 {
			s.dropForeignLocked()
		}
		s.mu.Unlock()
	}
}

// applyNote brings s up to n, a note of a call another gateway holds.
func (s *callerSession) applyNote(n QueueNote) {
	if !validHash(n.ID) {
		return
	}
	s.mu.Lock()
	defer s.poke()
	defer s.mu.Unlock()
	if s.doneForeign[n.ID] {
		return // its end was written already
	}
	if n.EventID == n.ID {
		// A call whose join was answered with the replica's id.
		if _, ended := s.early[n.ID]; !ended {
			s.foreignCallLocked(n, n.ID)
		}
		return
	}
	qc := s.queued[n.ID]
	switch {
	case qc != nil && !qc.foreign:
		return // this gateway holds it
	case qc == nil:
		if s.queued == nil {
			s.queued = map[string]*queuedCall{}
		}
		id, front, f := n.ID, s.front, s.f
		// Cancelling it (the caller's cancel, its stream gone) asks the
		// gateway that holds it (FrontDoor.Ended).
		qc = &queuedCall{id: id, foreign: true, cancel: func() { f.foreignEnd(front, id, CodeClientClosed) }}
		qc.shown = true
		s.queued[id] = qc
	}
	if n.Seq <= qc.seq {
		return
	}
	qc.seq = n.Seq
	switch {
	case n.Final != nil:
		qc.est, qc.final, qc.joining = nil, n.Final, false
	case n.EventID != "":
		qc.replica, qc.est, qc.joining = n.EventID, nil, false
		if s.alias == nil {
			s.alias = map[string]string{}
		}
		s.alias[n.EventID] = qc.id
		s.foreignCallLocked(n, qc.id)
	case n.Joining:
		qc.joining = true
	case n.Estimation != nil && qc.replica == "":
		qc.est = n.Estimation
	}
	s.notedLocked()
}

// foreignCallLocked records n's call, accepted by its replica, as in
// flight here with no slot (its holder has it): the stream relays its
// replica (busyLanes), stays open until its end and reports the end to
// the holder. s.mu is held.
func (s *callerSession) foreignCallLocked(n QueueNote, noteID string) {
	if n.Replica == "" || !validHash(n.Backend) {
		return
	}
	s.pending[n.EventID] = nil
	if s.calls == nil {
		s.calls = map[string]callMeta{}
	}
	s.calls[n.EventID] = callMeta{replica: n.Replica, backend: n.Backend, foreign: true, noteID: noteID}
	if s.lanes == nil {
		s.lanes = map[string]string{}
	}
	if _, ok := s.lanes[n.Replica]; !ok {
		s.lanes[n.Replica] = n.Backend
	}
	if s.bind.Replica == "" {
		s.bind.Replica, s.bind.Backend = n.Replica, n.Backend
	}
}

// notedLocked wakes the streams' lanes waiting for a foreign call's
// event id (frontIDs); s.mu is held.
func (s *callerSession) notedLocked() {
	if s.noted != nil {
		close(s.noted)
		s.noted = nil
	}
}

// foreignJoining returns a channel closed at the next note when a call of
// s held by another gateway is being joined at a replica, else nil.
func (s *callerSession) foreignJoining() <-chan struct{} {
	if !s.f.sharesQueue() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, qc := range s.queued {
		if qc.foreign && qc.joining {
			if s.noted == nil {
				s.noted = make(chan struct{})
			}
			return s.noted
		}
	}
	return nil
}

// shareCall tells the other gateways that a call of s their caller knows
// by eventID (its join was answered with the replica's id) runs on
// replica under backend: a stream of the session there relays it and
// keeps open until it ends.
func (s *callerSession) shareCall(eventID, replica, backend string) {
	f := s.f
	ctx, cancel := context.WithTimeout(f.ctx, noteStoreTime)
	defer cancel()
	n := QueueNote{ID: eventID, From: f.id, Seq: 1, EventID: eventID, Replica: replica, Backend: backend, Owner: s.binding().Owner}
	if err := f.cfg.QueueNotes.Put(ctx, s.front, n, f.cfg.SessionTTL); err != nil && f.ctx.Err() == nil {
		f.log.Debug("front door: could not share a call with the cluster",
			slog.String("session", shortHash(s.front)), slog.Any("error", err))
	}
}

// noteDoneLocked forgets a shared call that ended (or whose end was
// written to the caller), here and in the store; s.mu is held.
func (s *callerSession) noteDoneLocked(id string) {
	if s.doneForeign == nil || len(s.doneForeign) >= maxEarly {
		s.doneForeign = map[string]bool{}
	}
	s.doneForeign[id] = true
	if !s.f.sharesQueue() {
		return
	}
	f, front := s.f, s.front
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		ctx, cancel := context.WithTimeout(f.ctx, noteStoreTime)
		defer cancel()
		_ = f.cfg.QueueNotes.Done(ctx, front, id)
	}()
}

// dropForeignLocked forgets the calls other gateways hold once no stream
// of s is open here: they account for them. s.mu is held.
func (s *callerSession) dropForeignLocked() {
	for id, qc := range s.queued {
		if qc.foreign {
			delete(s.queued, id)
			delete(s.alias, qc.replica)
		}
	}
	for id, m := range s.calls {
		if m.foreign {
			delete(s.pending, id)
			delete(s.calls, id)
		}
	}
}
