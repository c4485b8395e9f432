package frontdoor

// The gateway's own queue, shown as Gradio shows its own: a join that
// must wait (for a slot, every replica busy; for the first replica,
// refwait.go) is answered at
// once with an event id of the gateway's, and the caller's queue/data
// stream carries Gradio estimation messages (rank, queue size, ETA) while
// it waits; a bridged call (bridge.go) runs under that id. Once
// a replica accepts the join, the replica's event id is mapped to the
// gateway's on the caller's stream; a wait that ends in the gateway's
// time-out (or any refusal) reaches the caller as process_completed with
// success false and the gateway's message, which @gradio/client shows.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/internal/logattr"
	"github.com/gradiopool/gradiopool/pool"
)

// queuedCall is a join answered with the gateway's event id while it
// waits for a slot (or is being forwarded).
type queuedCall struct {
	id     string             // the gateway's event id, the caller's
	cancel context.CancelFunc // ends the wait (the caller's cancel, its stream gone)
	// est is the latest estimation not yet written to the caller's
	// stream: only the latest is kept, however fast the queue moves.
	est []byte
	// final is the call's process_completed when it ended without a
	// replica accepting it; the entry goes once it is written.
	final []byte
	// replica is the replica's event id once the replica accepted.
	replica string
	// answered is when the caller was told the call's event id: its
	// read grace counts from then, not from the replica's accept.
	// Guarded by the session's mu.
	answered time.Time

	// told is decided once, by whichever comes first: the caller is told
	// the gateway's event id (toldGateway: the call waited), or its join
	// goes to a replica first (toldReplica: the caller gets the replica's
	// answer and id).
	told atomic.Int32
}

// The decisions of queuedCall.told.
const (
	toldUndecided int32 = iota
	toldGateway
	toldReplica
)

// eventID is the event id a call the gateway runs itself (bridge.go) is
// known by: the gateway's own when the caller was told it while the call
// waited, else a new one.
func (qc *queuedCall) eventID() string {
	if qc.aliased() {
		return qc.id
	}
	return newEventID()
}

// show commits the caller to the gateway's event id; false when the
// join went to a replica first (the caller gets the replica's answer).
func (qc *queuedCall) show() bool {
	return qc.told.CompareAndSwap(toldUndecided, toldGateway) || qc.told.Load() == toldGateway
}

func (qc *queuedCall) isShown() bool { return qc.told.Load() == toldGateway }

// mayShow reports whether the caller can still be told the call waits
// (show would succeed): false once a join of it went to a replica first.
// Only the call's own goroutine decides that (aliased), so the answer
// holds until it waits.
func (qc *queuedCall) mayShow() bool { return qc != nil && qc.told.Load() != toldReplica }

// aliased, before a join is forwarded, says whether the replica's event
// id is to be mapped to the gateway's; if not decided yet, it never is.
func (qc *queuedCall) aliased() bool {
	if qc == nil {
		return false
	}
	qc.told.CompareAndSwap(toldUndecided, toldReplica)
	return qc.told.Load() == toldGateway
}

// queueShown reports whether joins that must wait are answered at once
// and shown the gateway's queue.
func (f *FrontDoor) queueShown() bool { return f.conf().QueueUpdateInterval >= 0 }

// knownFn reports whether the app (the reference, as a connected replica
// serving it shows it) has fnIndex. A join of an unknown function waits
// for its answer as before: the app refuses it at once (a 4xx for the
// caller's input), never after the caller was told it waits; unless it
// came before any replica connected and waited for one (refwait.go).
func (f *FrontDoor) knownFn(fnIndex json.RawMessage) bool {
	var fn int
	if json.Unmarshal(fnIndex, &fn) != nil || !f.hasReference() {
		return false
	}
	c := f.presented()
	return c != nil && c.HasFn(fn)
}

// joinQueued runs place for the caller; when the call has to wait (for a
// slot, the first replica) it answers the join with a gateway event id
// and returns true (the call's goroutine then owns meta.release);
// otherwise the caller gets place's answer as it would have.
func (f *FrontDoor) joinQueued(w http.ResponseWriter, r *http.Request, s *callerSession, meta callMeta, place func(*http.Request, callMeta) answer) bool {
	// The call outlives the join's request once answered: it ends with
	// the front door, at StopCalls, or when the caller cancels it or
	// closes its stream (qc.cancel).
	bctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	stopF := context.AfterFunc(f.ctx, cancel)
	stopS := context.AfterFunc(f.stopCalls, cancel)
	jw := newJoinWatch()
	qc := &queuedCall{id: newEventID(), cancel: cancel}
	meta.qc = qc
	meta.watch = jw
	br := r.WithContext(bctx)
	var a answer // place's; read once done is closed
	done := make(chan struct{})
	f.qwg.Add(1)
	go func() {
		defer f.qwg.Done()
		defer close(done)
		a = place(br, meta)
	}()
	end := func() { stopF(); stopS(); cancel() }
	select {
	case <-done:
		end()
		s.answer(r.Context(), w, a)
		return false
	case <-r.Context().Done():
		// Gone before its join was answered: nothing was sent for it.
		cancel()
		<-done
		end()
		return false
	case <-jw.pool.Waited():
	case <-jw.waited:
	}
	if !qc.show() {
		<-done // its join is being forwarded: the caller gets its answer
		end()
		s.answer(r.Context(), w, a)
		return false
	}
	s.addQueued(qc)
	if !jw.waitedForReader() {
		f.stats.queued.Add(1) // a wait for a slot or a replica
	}
	s.mu.Lock()
	qc.answered = f.conf().Now() // the caller hears of the call now
	s.mu.Unlock()
	s.answer(r.Context(), w, relayed(http.StatusOK, "application/json", []byte(`{"event_id":"`+qc.id+`"}`)))
	// A wait nobody reads must not keep its place (and take the slot it
	// waits for, for nobody): the same grace as a call in flight.
	var grace *time.Timer
	if g := f.conf().ReadGrace; g > 0 {
		grace = time.AfterFunc(g, func() {
			if s.unread() && s.cancelQueuedCall(qc.id) {
				f.stats.notRead.Add(1)
				f.log.Info("front door: a call waiting in the gateway's queue was cancelled: its caller opened no data stream within the grace",
					slog.String("session", shortHash(s.front)), slog.String("endpoint", meta.endpoint), logattr.Ms("grace", g))
			}
		})
	}
	f.qwg.Add(1)
	go func() {
		defer f.qwg.Done()
		defer end()
		if grace != nil {
			defer grace.Stop()
		}
		f.showQueue(s, qc, jw, done)
		if meta.release != nil && !meta.kept.Load() {
			meta.release()
		}
		if !a.accepted {
			f.queuedEnded(s, qc, a, bctx.Err() != nil)
		}
	}()
	return true
}

// showQueue sends the caller estimation messages while its call waits,
// at most one per Config.QueueUpdateInterval and only when the rank, the
// queue's size or whether an ETA is known changed, until done.
func (f *FrontDoor) showQueue(s *callerSession, qc *queuedCall, jw positioner, done <-chan struct{}) {
	t := time.NewTicker(f.conf().QueueUpdateInterval)
	defer t.Stop()
	last := pool.QueuePosition{Rank: -1}
	for {
		if pos, ok := jw.Position(); ok && (pos.Rank != last.Rank || pos.Size != last.Size || pos.ETAKnown != last.ETAKnown || pos.Waking != last.Waking) {
			last = pos
			s.noteQueued(qc, estimation(qc.id, pos))
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// positioner is where a waiting call is (pool.QueueWatch).
type positioner interface {
	Position() (pool.QueuePosition, bool)
}

// estimation is Gradio 5's estimation message for pos.
func estimation(id string, pos pool.QueuePosition) []byte {
	var eta any
	if pos.ETAKnown {
		eta = math.Round(pos.ETA.Seconds()*1000) / 1000
	}
	b, _ := json.Marshal(map[string]any{"msg": "estimation", "event_id": id, "rank": max(pos.Rank, 0), "queue_size": max(pos.Size, pos.Rank+1, 1), "rank_eta": eta})
	return b
}

// queuedEnded tells the caller of a queued call no replica took (refused,
// failed or cancelled) on its stream: process_completed with success
// false and the gateway's message (the detail of the join's answer a).
func (f *FrontDoor) queuedEnded(s *callerSession, qc *queuedCall, a answer, cancelled bool) {
	if a.full && f.stopCalls.Err() == nil {
		// What a join refused so would have shown: both official
		// clients turn Gradio's queue_full into their busy error.
		s.finishQueued(qc, []byte(`{"msg":"queue_full","event_id":"`+qc.id+`"}`))
		return
	}
	msg := a.message()
	switch {
	case f.stopCalls.Err() != nil:
		msg = stoppedDetail
	case msg == "" && cancelled:
		msg = "gradiopool: the call was cancelled while it waited for a replica"
	case msg == "":
		msg = fmt.Sprintf("gradiopool: no replica could take the call (%d)", cmp.Or(a.status, http.StatusServiceUnavailable))
	}
	rb, _ := json.Marshal(map[string]any{
		"msg": "process_completed", "event_id": qc.id,
		"output":  map[string]any{"error": msg, "visible": true, "title": "Error"},
		"success": false, "title": "Error",
	})
	f.log.Info("front door: a call that waited in the gateway's queue ended without a replica",
		slog.String("session", shortHash(s.front)), slog.String("error", msg))
	s.finishQueued(qc, rb)
}

// addQueued records a call answered with the gateway's event id.
func (s *callerSession) addQueued(qc *queuedCall) {
	s.mu.Lock()
	if s.queued == nil {
		s.queued = map[string]*queuedCall{}
	}
	s.queued[qc.id] = qc
	s.mu.Unlock()
	s.poke()
}

// poke wakes the session's data stream.
func (s *callerSession) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// noteQueued makes est the estimation of qc to write (the one before is
// dropped if not written yet).
func (s *callerSession) noteQueued(qc *queuedCall, est []byte) {
	s.mu.Lock()
	if qc.replica != "" || s.queued[qc.id] != qc {
		s.mu.Unlock()
		return
	}
	qc.est = est
	s.mu.Unlock()
	s.poke()
}

// finishQueued sets qc's last message.
func (s *callerSession) finishQueued(qc *queuedCall, final []byte) {
	s.mu.Lock()
	if s.queued[qc.id] != qc {
		s.mu.Unlock()
		return // its stream went away: nobody to tell
	}
	qc.est, qc.final = nil, final
	s.mu.Unlock()
	s.poke()
}

// takeQueuedNotes returns the gateway's messages to write to the
// caller's stream now, forgetting the ended calls they end.
func (s *callerSession) takeQueuedNotes() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]byte
	for id, qc := range s.queued {
		if qc.est != nil {
			out = append(out, qc.est)
			qc.est = nil
		}
		if qc.final != nil {
			out = append(out, qc.final)
			delete(s.queued, id)
		}
	}
	return out
}

// waitingQueued reports whether a call of s waits in the gateway's queue
// (or has a message still to write): the caller's stream must stay open.
func (s *callerSession) waitingQueued() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, qc := range s.queued {
		if qc.replica == "" {
			return true
		}
	}
	return false
}

// cancelQueued ends the waits of s's queued calls and forgets them (the
// caller's stream is gone: Gradio drops a session's calls then).
func (s *callerSession) cancelQueued() {
	s.mu.Lock()
	var cs []context.CancelFunc
	for id, qc := range s.queued {
		if qc.replica == "" {
			cs = append(cs, qc.cancel)
			delete(s.queued, id)
		}
	}
	s.mu.Unlock()
	for _, c := range cs {
		c()
	}
}

// cancelQueuedCall ends the wait of the call the caller knows as id;
// false when it does not wait (unknown, or accepted already).
func (s *callerSession) cancelQueuedCall(id string) bool {
	s.mu.Lock()
	qc := s.queued[id]
	taken := qc != nil && qc.replica != ""
	s.mu.Unlock()
	if qc == nil || taken {
		return false
	}
	qc.cancel()
	return true
}

// forgetQueued drops the queued call the caller knows as id when no
// replica has it: the bridge told the caller it ended (a cancel while
// its join was on the way), so the end of its wait must not tell it
// again.
func (s *callerSession) forgetQueued(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if qc := s.queued[id]; qc != nil && qc.replica == "" {
		delete(s.queued, id)
	}
}

// frontIDs rewrites a replica's message for the caller: the event id of
// a queued call becomes the gateway's. While a queued call's join is in
// flight (s.joining), a message of a call not known yet waits for the
// join's answer: it may be that call's, already running.
func (s *callerSession) frontIDs(data []byte, eventID string) []byte {
	s.mu.Lock()
	gid := ""
	for {
		if c := s.calls[eventID]; c != nil {
			gid = c.front
			break
		}
		if s.joining == 0 {
			break
		}
		s.changedLocked().Wait()
	}
	s.mu.Unlock()
	if gid == "" {
		return data
	}
	return bytes.Replace(data, []byte(`"`+eventID+`"`), []byte(`"`+gid+`"`), 1)
}

// startJoining counts a queued call's join in flight until the returned
// func runs (frontIDs).
func (s *callerSession) startJoining() func() {
	s.mu.Lock()
	s.joining++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.joining--
		s.changedLocked().Broadcast()
		s.mu.Unlock()
	}
}

// changedLocked is s.changed, made on first use; s.mu is held.
func (s *callerSession) changedLocked() *sync.Cond {
	if s.changed == nil {
		s.changed = sync.NewCond(&s.mu)
	}
	return s.changed
}

// frontID is the caller's event id of a call (the gateway's for a
// queued call), and replicaID the reverse.
func (s *callerSession) frontID(eventID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.calls[eventID]; c != nil && c.front != "" {
		return c.front
	}
	return eventID
}

func (s *callerSession) replicaID(eventID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if qc := s.queued[eventID]; qc != nil && qc.replica != "" {
		return qc.replica
	}
	return eventID
}
