package frontdoor

// GET queue/data: relaying a bound session's event stream from its
// replica, and reporting the calls lost with it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/appshape"
	"github.com/gradiopool/gradiopool/internal/sse"
)

// sessionNotFound is what Gradio streams for an unknown session.
var sessionNotFound = []byte(`{"msg":"unexpected_error","event_id":null,"message":"404: Not Found","session_not_found":true,"success":false}`)

// maxQuietReopens bounds the backend streams reopened in a row that
// delivered nothing while the caller's calls were pending.
const maxQuietReopens = 2

// handleData is GET queue/data: the caller's stream, relayed from its
// backend sessions' streams with event ids and messages intact (file URLs
// rewritten to the gateway). Each process_completed frees its call's slot.
//
// The calls of one caller session may run on several replicas (spread
// calls, see Spreadable): the gateway reads one backend stream per
// replica running a call of the session (a lane), and writes their
// messages to the caller's one stream; the messages of one call come from
// one lane, so they stay in order. A lane starts when a call is accepted
// there and ends at its replica's close_stream; the caller gets
// close_stream when no lane is left and no call is in flight.
//
// When a replica ends its stream (close_stream) while a call of the
// session is in flight there — a join accepted just after the replica
// decided to close — the gateway reopens the backend stream, where the
// replica kept that call's messages, and goes on relaying. This closes
// Gradio's close race (the replica decides to close the stream of a
// session with no call left just before a new join of it arrives) for the
// caller: @gradio/client keeps no stream open for a call whose join was
// answered before it had seen the close_stream, and that call would never
// complete.
func (f *FrontDoor) handleData(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	front := r.URL.Query().Get("session_hash")
	var s *callerSession
	if validHash(front) {
		s = f.session(ctx, front, f.owner(r), false)
	}
	if s == nil || (s.binding().Replica == "" && !s.waitingQueued()) {
		rc := startSSE(w)
		_ = rc.Data(sessionNotFound)
		return
	}
	w, pre, done := f.streamUntilReference(w, r, s)
	if done {
		return
	}
	if s.bridgeOf(false) == nil && !f.relayable(s.binding().Replica) && s.streamDrained() {
		// Bound to an older replica, with no bridged call here: its calls
		// (if any) live in the gateway instance that took their joins (a
		// cluster sent the stream elsewhere). Unknown, as in Gradio.
		rc := startSSE(w)
		_ = rc.Data(sessionNotFound)
		return
	}
	defer s.stream(true)()
	b := s.binding()
	f.annotate(r, slog.String("replica", b.Replica))
	if u, err := user(r); err == nil && u != "" {
		f.annotate(r, slog.String("user", f.conf().HashUser(u)))
	}
	// The replicas' streams also end at StopCalls (a drain's time-out);
	// the caller's stream then gets its calls' errors (failLane).
	rctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(f.stopCalls, cancel)()
	// quit tells the lanes that the handler reads no more ends.
	quit := make(chan struct{})
	stop := sync.OnceFunc(func() { cancel(); close(quit) })
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()

	out := &muxWriter{w: w}
	defer func() {
		if out.wroteCloseStream() {
			s.closed(ctx)
		}
	}()
	if pre {
		out.start() // streamUntilReference started it
	}
	ends := make(chan laneEnd)
	active := map[string]bool{}
	start := func(replica, backend string) {
		active[replica] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := f.runLane(rctx, r, s, replica, backend, out)
			select {
			case ends <- e:
			case <-quit:
			}
		}()
	}
	startBusy := func() {
		for rep, be := range s.busyLanes() {
			if !active[rep] {
				start(rep, be)
			}
		}
	}
	gone := func() {
		// The caller went away: the replicas drop the session's calls
		// when their streams close (Gradio's rule), so their slots are
		// free; the bridge cancels its own.
		stop()
		wg.Wait()
		if out.isClosed() {
			// No: a lane ended the stream with close_stream, and the
			// caller left after it. A call of the session in flight now
			// was joined after, for the caller's next stream.
			return
		}
		s.releaseStream(codeClientClosed)
	}
	// notes writes the gateway's own messages: estimations of the calls
	// in its queue, the end of those that got no replica, and the
	// bridge's messages of the calls that run on older replicas. False
	// when the caller is gone.
	notes := func() bool {
		out.dataFrom(s.takeQueuedNotes)
		for _, m := range s.bridgeMessages() {
			if err := out.data(m); err != nil {
				// Closed by a lane (the session drained, so the bridge
				// had nothing of its own in flight) is not the caller gone.
				return errors.Is(err, errStreamFinished)
			}
		}
		return true
	}
	startBusy()
	if len(active) == 0 && b.Replica != "" && !s.waitingQueued() && f.relayable(b.Replica) && s.streamDrained() {
		// Nothing of the session in flight that another source feeds:
		// relay its replica's stream, as Gradio would answer it.
		start(b.Replica, b.Backend)
	}
	if len(active) == 0 {
		out.start() // only calls in the gateway's queue: their messages come from here
	}
	// next starts the lanes of calls newly in flight, writes the gateway's own
	// messages and ends a drained stream (Gradio 5's rule); true: all done.
	next := func() bool {
		startBusy()
		if !notes() {
			gone()
			return true
		}
		return len(active) == 0 && out.closeIfDrained(s, nil)
	}
	if next() {
		return
	}
	// While only the gateway feeds the stream (its queue, the bridge; no
	// replica's stream relayed, whose own heartbeats pass), Gradio's
	// heartbeat keeps proxies from closing it during a long wait.
	hb := time.NewTicker(f.conf().HeartbeatInterval)
	defer hb.Stop()
	for {
		select {
		case <-ctx.Done():
			gone()
			return
		case <-hb.C:
			if out.isClosed() {
				return
			}
			if len(active) == 0 && out.data([]byte(`{"msg":"heartbeat"}`)) != nil {
				gone()
				return
			}
		case <-s.wake:
			if out.isClosed() || next() {
				return // closed by a lane (the session's last completion) or by next
			}
		case e := <-ends:
			delete(active, e.replica)
			if out.isClosed() {
				return // a lane ended it with the session's last completion
			}
			if e.gone || ctx.Err() != nil {
				gone()
				return
			}
			if e.answer != nil {
				if !out.started() && len(active) == 0 {
					e.answer.writeTo(w)
					return
				}
				e.cause = fmt.Errorf("queue/data %d %s", e.answer.status, excerpt(e.answer.body))
			}
			if e.cause != nil {
				f.failLane(out, s, e.replica, e.cause, e.unopened)
			}
			if next() {
				return
			}
		}
	}
}

// muxWriter is the caller's stream, written by every lane; it starts when
// a replica's stream did (or at the first message).
type muxWriter struct {
	w      http.ResponseWriter
	mu     sync.Mutex // guards rc, closed and the writes
	rc     *sse.Writer
	closed bool // closeIfDrained wrote close_stream: nothing more is written
}

// errStreamFinished is data's answer once closeIfDrained has closed the stream.
var errStreamFinished = errors.New("frontdoor: the caller's stream was closed with close_stream")

var closeStream = []byte(`{"msg":"close_stream","event_id":null}`)

func (m *muxWriter) data(b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errStreamFinished
	}
	m.startLocked()
	return m.rc.Data(b)
}

// wroteCloseStream reports whether close_stream was written (or its
// write tried: the session's stream is closing either way).
func (m *muxWriter) wroteCloseStream() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// closeIfDrained ends the stream when s has no call left for it
// (callerSession.closeIfDrained, which marks it closing): it writes last
// (unless nil) and close_stream in one write, as Gradio ends a session's
// stream after its last call's process_completed. False, writing
// nothing, when a call of s is left or the stream is closed already.
//
// Why one write: the official JS client then reads both before its code
// sees the call end, so the next call it makes opens a new stream.
// Written apart, the client could send that next join between them, take
// the join's answer first (its stream still open, it opens no other) and
// then close the stream, leaving the new call nothing to read.
func (m *muxWriter) closeIfDrained(s *callerSession, last []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || !s.closeIfDrained() {
		return false
	}
	m.startLocked()
	m.closed = true
	if last != nil {
		_ = m.rc.DataAll(last, closeStream)
	} else {
		_ = m.rc.Data(closeStream)
	}
	return true
}

func (m *muxWriter) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// dataFrom writes the messages take returns, taken under the stream's
// lock: an estimation of a queued call taken before its replica accepted
// it is written before that replica's messages of it (a lane writes them
// once the call is accepted, which ends its estimations).
func (m *muxWriter) dataFrom(take func() [][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	for _, b := range take() {
		m.startLocked()
		_ = m.rc.Data(b)
	}
}

// start sends the stream's headers if they are not sent yet.
func (m *muxWriter) start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.startLocked()
}

// startLocked is start with m.mu held.
func (m *muxWriter) startLocked() {
	if m.rc == nil {
		m.rc = startSSE(m.w)
	}
}

func (m *muxWriter) started() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rc != nil
}

// laneEnd is how the relay of one replica's backend stream ended.
type laneEnd struct {
	replica string
	gone    bool    // the caller went away
	cause   error   // the lane broke: its calls are lost
	answer  *answer // the replica answered the stream with this non-200 (not 5xx) before anything was relayed
	// unopened: the lane's first stream could not be opened, so nothing
	// of its calls was seen running (a replica short of threads that
	// serves the stream after it was given up drops the session's
	// queued calls: Gradio 5.49.1 measured).
	unopened bool
}

// runLane relays the backend stream of the session at replica until the
// replica closes it with no call of the session left there.
func (f *FrontDoor) runLane(ctx context.Context, r *http.Request, s *callerSession, replica, backend string, out *muxWriter) laneEnd {
	end := laneEnd{replica: replica}
	app, err := f.appFor(ctx, replica)
	if err != nil {
		end.cause = err
		return end
	}
	b := binding{Replica: replica, Backend: backend}
	quiet := 0
	for opened := false; ; opened = true {
		resp, err := f.openData(ctx, r, app, b)
		if err != nil {
			end.cause, end.unopened = err, !opened
			return end
		}
		if resp.StatusCode != http.StatusOK {
			rb, _ := io.ReadAll(io.LimitReader(resp.Body, maxSmallBody))
			resp.Body.Close()
			if resp.StatusCode >= 500 || out.started() {
				end.cause = fmt.Errorf("queue/data %d %s", resp.StatusCode, excerpt(rb))
			} else {
				a := relayed(resp.StatusCode, resp.Header.Get("Content-Type"), rb)
				end.answer = &a
			}
			return end
		}
		out.start() // the caller's client waits for the stream's headers
		relayed, reopen, done, cause := f.relayData(out, r, s, app, b, resp)
		resp.Body.Close()
		if done {
			return end
		}
		if !reopen {
			if ctx.Err() != nil && f.stopCalls.Err() != nil {
				end.cause = f.stopCalls.Err()
				return end
			}
			end.gone, end.cause = cause == nil || ctx.Err() != nil, cause
			return end
		}
		if relayed > 0 {
			quiet = 0
		} else if quiet++; quiet > maxQuietReopens {
			end.cause = errors.New("the replica ends the session's stream while its calls are pending")
			return end
		}
	}
}

// openData opens the backend session's queue/data stream. Its headers may
// come late from a replica short of threads (Gradio's queue/data waits
// for one) while its other calls stream: DoWhileAlive waits for them as
// long as the replica shows life.
func (f *FrontDoor) openData(ctx context.Context, r *http.Request, app *gradio.Client, b binding) (*http.Response, error) {
	q := url.Values{"session_hash": {b.Backend}}
	req, err := app.NewRequest(ctx, http.MethodGet, app.URL("queue/data")+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	f.callerHeaders(r, req.Header)
	return app.DoWhileAlive(req)
}

// relayData relays one backend stream to the caller. It returns how many
// event messages it relayed, and: done when the lane is over (the
// replica's close_stream, with no call of the session left there; the
// caller's close_stream is handleData's), reopen when the backend closed
// while calls are pending there, else the cause of the end (nil: the
// caller went away).
func (f *FrontDoor) relayData(out *muxWriter, r *http.Request, s *callerSession, app *gradio.Client, b binding, resp *http.Response) (relayed int, reopen, done bool, cause error) {
	rw := f.rewriter(app, b.Replica, f.root(r))
	rd := sse.NewReaderBudget(resp.Body, 0, app.EventBudget().Party(s.client)) // the replica's events count toward its pool's total, in its caller's (its client's) fair share
	// A replica numbering the app's components otherwise (appshape.IDMaps): the
	// ids its completions name are mapped back to the presented ones.
	toPresented := appshape.Inverse(f.ids.Get(f.presented(), app.Config()))
	defer rd.Release()
	// held is the session's last completion, kept until the replica's
	// close_stream that follows it so that both reach the caller in one
	// write (muxWriter.finish). The replica's stream is read to its end:
	// Gradio drops a session's message queue when its reader goes away.
	var held []byte
	flush := func() error {
		if held == nil {
			return nil
		}
		err := out.data(held)
		held = nil
		relayed++
		return err
	}
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the replica ended the stream without close_stream")
			}
			if flush() != nil {
				return relayed, false, false, nil // the caller went away
			}
			return relayed, false, false, err
		}
		app.NoteStreamMessage() // the replica is alive, however late it answers its pings
		var msg struct {
			Msg     string  `json:"msg"`
			EventID *string `json:"event_id"`
			Success *bool   `json:"success"` // process_completed: false when the app raised (gr.Error)
		}
		_ = json.Unmarshal(ev.Data, &msg)
		if msg.EventID != nil {
			s.observe(*msg.EventID, ev.Data) // the endpoint's figures, as for /v1 calls
		}
		if msg.Msg == "close_stream" {
			if held != nil && out.closeIfDrained(s, held) {
				return relayed + 1, false, true, nil
			}
			if flush() != nil {
				return relayed, false, false, nil
			}
			// One look: a call accepted between two would make the lane
			// neither reopen nor end, which runLane takes for the caller
			// gone (the stream then ended without close_stream, and the
			// official client waited on it for ever).
			left := len(s.callsOn(b.Replica, true))
			return relayed, left > 0, left == 0, nil
		}
		if flush() != nil {
			return relayed, false, false, nil
		}
		data := ev.Data
		if msg.EventID != nil {
			data = s.frontIDs(data, *msg.EventID)
		}
		if msg.Msg == "process_completed" && msg.Success != nil && !*msg.Success {
			data = f.presentError(app, data) // a mixed set: one gr.Error text
		}
		if toPresented != nil && (msg.Msg == "process_completed" || msg.Msg == "process_generating") {
			data = appshape.MapChangedStateIDs(data, toPresented)
		}
		if msg.Msg == "process_completed" && msg.EventID != nil {
			// The call ends before its completion is written: if it was
			// the session's last, the completion waits for the replica's
			// close_stream (held), with which it ends the caller's stream.
			code := ""
			if msg.Success != nil && !*msg.Success {
				code = codeAppError
			}
			s.complete(*msg.EventID, code)
			if s.holdsLastCompletion() && s.streamDrained() {
				held = bytes.Clone(rw.rewrite(data)) // the reader reuses its buffer
				continue
			}
		}
		if werr := out.data(rw.rewrite(data)); werr != nil {
			return relayed, false, false, nil // the caller went away
		}
		if msg.EventID != nil {
			relayed++
		}
	}
}

// sequentialFor is how long after a session last had two calls in flight
// at once its caller is taken to call one at a time again.
const sequentialFor = 10 * time.Second

// holdsLastCompletion reports whether the session's last completion is to
// wait for the replica's close_stream and end the caller's stream with it
// (relayData). Only for a caller that calls one at a time: it sends its
// next join after it saw the completion, so with both in one write it
// cannot take that join's answer on a stream about to close. A caller
// with calls in flight at once sends joins the completion does not wait
// for; for it the completion goes at once and the stream closes only if
// no join came meanwhile (when the replica's close_stream comes), which
// keeps its stream open under steady traffic.
func (s *callerSession) holdsLastCompletion() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overlapAt.IsZero() || s.f.conf().Now().Sub(s.overlapAt) > sequentialFor
}

// failLane reports every call in flight of s on replica as lost (Gradio's
// error shape: process_completed with success false) and frees their
// slots. The calls are never run again.
func (f *FrontDoor) failLane(out *muxWriter, s *callerSession, replica string, cause error, unopened bool) {
	ids := s.callsOn(replica, true)
	stopped := f.stopCalls.Err() != nil
	what := "the connection to the replica was lost while it ran this call"
	if unopened {
		what = "the replica's stream of this call could not be opened (the call may not have run)"
	}
	for _, id := range ids {
		msg := "gradiopool: " + what + "; the call is not run again"
		switch {
		case stopped:
			msg = stoppedDetail
		case f.conf().ShowReplicaErrors:
			msg = fmt.Sprintf("gradiopool: %s (replica %s: %v); the call is not run again", what, replica, cause)
		}
		rec, _ := json.Marshal(map[string]any{
			"msg": "process_completed", "event_id": s.frontID(id),
			"output":  map[string]any{"error": msg, "visible": true, "title": "Error"},
			"success": false, "title": "Error",
		})
		_ = out.data(rec)
		s.complete(id, codeReplicaLost)
		f.stats.lost.Add(1)
	}
	if len(ids) > 0 && stopped {
		f.log.Warn("front door: calls stopped by the drain time-out", slog.String("replica", replica),
			slog.String("session", shortHash(s.front)), slog.Int("calls", len(ids)))
	} else if len(ids) > 0 {
		f.log.Warn("front door: replica lost calls in flight", slog.String("replica", replica),
			slog.String("session", shortHash(s.front)), slog.Int("calls", len(ids)), slog.Any("error", cause))
	}
}
