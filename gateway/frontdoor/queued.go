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
	"time"

	"github.com/gradiopool/gradiopool/internal/logattr"
	"github.com/gradiopool/gradiopool/pool"
)

// The decisions of call.told.
const (
	toldUndecided int32 = iota
	toldGateway
	toldReplica
)

// show commits the caller to the gateway's event id and enters c in
// the gateway's queue, in one step under s.mu (a join that finds the
// call shown finds it there: joinCall, frontIDs); false when the join
// went to a replica first (the caller gets the replica's answer).
func (s *callerSession) show(c *call) bool {
	s.mu.Lock()
	if !c.told.CompareAndSwap(toldUndecided, toldGateway) && c.told.Load() != toldGateway {
		s.mu.Unlock()
		return false
	}
	if s.queued == nil {
		s.queued = map[string]*call{}
	}
	s.queued[c.gatewayID] = c
	s.mu.Unlock()
	s.poke()
	return true
}

func (c *call) isShown() bool { return c.told.Load() == toldGateway }

// mayShow reports whether the caller can still be told the call waits
// (show would succeed): false once a join of it went to a replica first.
// Only the call's own goroutine decides that (aliased), so the answer
// holds until it waits.
func (c *call) mayShow() bool { return c.gatewayID != "" && c.told.Load() != toldReplica }

// aliased, before a join is forwarded, says whether the replica's event
// id is to be mapped to the gateway's; if not decided yet, it never is.
func (c *call) aliased() bool {
	if c.gatewayID == "" {
		return false
	}
	c.told.CompareAndSwap(toldUndecided, toldReplica)
	return c.told.Load() == toldGateway
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
// and returns true (the call's goroutine then owns c.release);
// otherwise the caller gets place's answer as it would have.
func (f *FrontDoor) joinQueued(w http.ResponseWriter, r *http.Request, s *callerSession, c *call, place func(*http.Request, *call) answer) bool {
	// The call outlives the join's request once answered: it ends with
	// the front door, at StopCalls, or when the caller cancels it or
	// closes its stream (c.cancel).
	bctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	stopF := context.AfterFunc(f.ctx, cancel)
	stopS := context.AfterFunc(f.stopCalls, cancel)
	jw := newJoinWatch()
	c.gatewayID, c.cancel, c.watch = newEventID(), cancel, jw
	br := r.WithContext(bctx)
	var a answer // place's; read once done is closed
	done := make(chan struct{})
	f.qwg.Add(1)
	go func() {
		defer f.qwg.Done()
		defer close(done)
		a = place(br, c)
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
	if !s.show(c) {
		<-done // its join is being forwarded: the caller gets its answer
		end()
		s.answer(r.Context(), w, a)
		return false
	}
	if !jw.waitedForReader() {
		f.stats.queued.Add(1) // a wait for a slot or a replica
	}
	s.mu.Lock()
	c.answered = f.conf().Now() // the caller hears of the call now
	s.mu.Unlock()
	s.answer(r.Context(), w, relayed(http.StatusOK, "application/json", []byte(`{"event_id":"`+c.gatewayID+`"}`)))
	// A wait nobody reads must not keep its place (and take the slot it
	// waits for, for nobody): the same grace as a call in flight.
	var grace *time.Timer
	if g := f.conf().ReadGrace; g > 0 {
		grace = time.AfterFunc(g, func() {
			if s.unread() && s.cancelQueuedCall(c.gatewayID) {
				f.stats.notRead.Add(1)
				f.log.Info("front door: a call waiting in the gateway's queue was cancelled: its caller opened no data stream within the grace",
					slog.String("session", shortHash(s.front)), slog.String("endpoint", c.endpoint), logattr.Ms("grace", g))
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
		f.showQueue(s, c, jw, done)
		if c.release != nil && !c.kept.Load() {
			c.release()
		}
		if !a.accepted {
			f.queuedEnded(s, c, a, bctx.Err() != nil)
		}
	}()
	return true
}

// showQueue sends the caller estimation messages while its call waits,
// at most one per Config.QueueUpdateInterval and only when the rank, the
// queue's size or whether an ETA is known changed, until done.
func (f *FrontDoor) showQueue(s *callerSession, c *call, jw positioner, done <-chan struct{}) {
	t := time.NewTicker(f.conf().QueueUpdateInterval)
	defer t.Stop()
	last := pool.QueuePosition{Rank: -1}
	for {
		if pos, ok := jw.Position(); ok && (pos.Rank != last.Rank || pos.Size != last.Size || pos.ETAKnown != last.ETAKnown || pos.Waking != last.Waking) {
			last = pos
			s.noteQueued(c, estimation(c.gatewayID, pos))
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
func (f *FrontDoor) queuedEnded(s *callerSession, c *call, a answer, cancelled bool) {
	if a.full && f.stopCalls.Err() == nil {
		// What a join refused so would have shown: both official
		// clients turn Gradio's queue_full into their busy error.
		s.finishQueued(c, []byte(`{"msg":"queue_full","event_id":"`+c.gatewayID+`"}`))
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
		"msg": "process_completed", "event_id": c.gatewayID,
		"output":  map[string]any{"error": msg, "visible": true, "title": "Error"},
		"success": false, "title": "Error",
	})
	f.log.Info("front door: a call that waited in the gateway's queue ended without a replica",
		slog.String("session", shortHash(s.front)), slog.String("error", msg))
	s.finishQueued(c, rb)
}

// poke wakes the session's data stream.
func (s *callerSession) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// noteQueued makes est the estimation of c to write (the one before is
// dropped if not written yet).
func (s *callerSession) noteQueued(c *call, est []byte) {
	s.mu.Lock()
	if c.state >= callAccepted || s.queued[c.gatewayID] != c {
		s.mu.Unlock()
		return
	}
	c.est = est
	s.mu.Unlock()
	s.poke()
}

// finishQueued sets c's last message.
func (s *callerSession) finishQueued(c *call, final []byte) {
	s.mu.Lock()
	if s.queued[c.gatewayID] != c {
		s.mu.Unlock()
		return // its stream went away: nobody to tell
	}
	c.state, c.est, c.final = callEnded, nil, final
	s.mu.Unlock()
	s.poke()
}

// takeQueuedNotes returns the gateway's messages to write to the
// caller's stream now, forgetting the ended calls they end.
func (s *callerSession) takeQueuedNotes() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]byte
	for id, c := range s.queued {
		if c.est != nil {
			out = append(out, c.est)
			c.est = nil
		}
		if c.final != nil {
			out = append(out, c.final)
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
	for _, c := range s.queued {
		if c.state != callAccepted {
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
	for id, c := range s.queued {
		if c.state != callAccepted {
			cs = append(cs, c.cancel)
			delete(s.queued, id)
		}
	}
	s.mu.Unlock()
	for _, cancel := range cs {
		cancel()
	}
}

// cancelQueuedCall ends the wait of the call the caller knows as id;
// false when it does not wait (unknown, or accepted already).
func (s *callerSession) cancelQueuedCall(id string) bool {
	s.mu.Lock()
	c := s.queued[id]
	taken := c != nil && c.state == callAccepted
	s.mu.Unlock()
	if c == nil || taken {
		return false
	}
	c.cancel()
	return true
}

// forgetQueued drops the queued call the caller knows as id when no
// replica has it: the bridge told the caller it ended (a cancel while
// its join was on the way), so the end of its wait must not tell it
// again.
func (s *callerSession) forgetQueued(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.queued[id]; c != nil && c.state != callAccepted {
		delete(s.queued, id)
	}
}

// frontIDs rewrites a replica's message for the caller: the event id of
// a queued call becomes the gateway's. While a queued call's join is in
// flight (joiningLocked), a message of a call not known yet waits for the
// join's answer: it may be that call's, already running.
func (s *callerSession) frontIDs(data []byte, eventID string) []byte {
	s.mu.Lock()
	gid := ""
	for {
		if c := s.calls[eventID]; c != nil {
			if c.isShown() {
				gid = c.gatewayID
			}
			break
		}
		if !s.joiningLocked() {
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

// joinCall marks c joining until the returned func runs, which makes it
// waiting again unless a replica accepted it (addPending) or it ended.
// No lock is held across the join.
func (s *callerSession) joinCall(c *call) func() {
	s.mu.Lock()
	c.state = callJoining
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if c.state == callJoining {
			c.state = callWaiting // refused: it may wait for another replica
		}
		s.changedLocked().Broadcast()
		s.mu.Unlock()
	}
}

// joiningLocked reports whether the join of a call shown in the
// gateway's queue is on its way; s.mu is held.
func (s *callerSession) joiningLocked() bool {
	for _, c := range s.queued {
		if c.state == callJoining {
			return true
		}
	}
	return false
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
	if c := s.calls[eventID]; c != nil && c.isShown() {
		return c.gatewayID
	}
	return eventID
}

func (s *callerSession) replicaID(eventID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.queued[eventID]; c != nil && c.replicaID != "" {
		return c.replicaID
	}
	return eventID
}
