package gradiotest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// message kinds
const (
	msgEstimation = "estimation"
	msgStarts     = "process_starts"
	msgProgress   = "progress"
	msgLog        = "log"
	msgGenerating = "process_generating"
	// msgStreaming is in streaming.go
	msgCompleted  = "process_completed"
	msgSendData   = "send_data"
	msgHeartbeat  = "heartbeat"
	msgClose      = "close_stream"
	msgUnexpected = "unexpected_error"
	msgQueueFull  = "queue_full"
)

// message is one queued SSE message of a session.
type message struct {
	kind    string
	eventID string
	body    obj // fields after msg and event_id
	// for the /call translation:
	full    []json.RawMessage // full output values (generating, completed)
	success bool
	errData any // error payload of a failed completion
	// drained is set on a process_completed when a stream takes it and its
	// event was the last pending one of its session.
	drained bool
}

const (
	statusQueued = iota
	statusRunning
	statusDone
)

// simSession is the per-session_hash state: message queue, pending events and
// gr.State values. Guarded by Server.mu.
type simSession struct {
	hash     string
	msgs     []*message
	wake     chan struct{} // capacity 1; signalled when msgs grows
	pending  map[string]bool
	state    map[int]json.RawMessage
	hasQueue bool      // false after a dropped stream until the next join
	stopped  bool      // server restarted: streams say so and end
	ended    bool      // a v0 event gave up: its stream ends once drained
	beats    int       // open /heartbeat connections
	closedAt time.Time // when the last heartbeat closed (zero: open or never)
}

func (sess *simSession) signal() {
	select {
	case sess.wake <- struct{}{}:
	default:
	}
}

// event is one call. Guarded by Server.mu.
type event struct {
	id      string
	fnIndex int
	ep      *Endpoint
	group   *group
	sess    *simSession // owner of the gr.State values
	q       *simSession // where its messages go (sess, or its own for v0 and /run)
	data    []json.RawMessage
	root    string
	header  http.Header
	simple  bool // /call: full values, never diffs
	v0      bool // sse v0: data arrives after send_data
	v0data  chan []json.RawMessage
	stream  *inputStream // streaming inputs; see streaming.go
	status  int
	alive   bool
	ctx     context.Context
	cancel  context.CancelFunc
	started time.Time
}

// kill marks the event dead: its later messages are dropped and its handler
// context is cancelled.
func (ev *event) kill() {
	ev.alive = false
	if ev.cancel != nil {
		ev.cancel()
	}
}

// group is the queue of one endpoint (its concurrency_id).
type group struct {
	ep      *Endpoint
	queue   []*event
	running int
	runs    int
	total   float64 // seconds, for average_duration
}

func (g *group) remove(ev *event) {
	if i := slices.Index(g.queue, ev); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
	}
}

func (g *group) avg() any {
	if g.runs == 0 {
		return nil
	}
	return g.total / float64(g.runs)
}

func (s *Server) limitOf(g *group) int {
	if g.ep.ConcurrencyLimit != 0 {
		return g.ep.ConcurrencyLimit
	}
	if s.knobs.DefaultConcurrencyLimit != 0 {
		return s.knobs.DefaultConcurrencyLimit
	}
	return DefaultConcurrencyLimit
}

func (s *Server) queueSizeLocked() int {
	n := 0
	for _, g := range s.groups {
		n += len(g.queue)
	}
	return n
}

// maxSessions bounds the session table like Gradio's LRUs (2000 message
// queues, 10000 state sessions): beyond it, idle sessions (nothing pending or
// buffered) are forgotten, gr.State included.
const maxSessions = 10000

// sessionLocked returns the session for hash, creating it.
func (s *Server) sessionLocked(hash string) *simSession {
	sess := s.sessions[hash]
	if sess == nil && len(s.sessions) >= maxSessions {
		for h, old := range s.sessions {
			if len(old.pending) == 0 && len(old.msgs) == 0 {
				delete(s.sessions, h)
			}
		}
		for id, h := range s.callSess {
			if s.sessions[h] == nil {
				delete(s.callSess, id)
			}
		}
	}
	if sess == nil {
		sess = &simSession{hash: hash, wake: make(chan struct{}, 1), pending: map[string]bool{}, state: map[int]json.RawMessage{}}
		s.sessions[hash] = sess
	}
	return sess
}

// pushLocked appends a message to the session's queue.
func (s *Server) pushLocked(sess *simSession, m *message) {
	sess.msgs = append(sess.msgs, m)
	sess.signal()
}

// emit queues a message for a live event.
func (s *Server) emit(ev *event, kind string, body obj) {
	s.emitMsg(ev, &message{kind: kind, eventID: ev.id, body: body})
}

func (s *Server) emitMsg(ev *event, m *message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ev.alive {
		return
	}
	s.pushLocked(ev.q, m)
}

func (s *Server) estimationLocked(ev *event, rank int) {
	g := ev.group
	var eta any
	if a := g.avg(); a != nil {
		eta = a.(float64) * float64(rank+1)
	}
	body := obj{{"rank", rank}, {"queue_size", len(g.queue)}, {"rank_eta", eta}}
	if !s.Mode.atLeast(protoV1) {
		body = obj{{"rank", rank}, {"queue_size", len(g.queue)}, {"avg_event_process_time", g.avg()},
			{"avg_event_concurrent_process_time", g.avg()}, {"rank_eta", eta}, {"queue_eta", 0}}
	}
	s.pushLocked(ev.q, &message{kind: msgEstimation, eventID: ev.id, body: body})
}

// dispatchLocked starts queued events of g while its concurrency limit
// allows, then re-sends estimations to the ones still waiting.
func (s *Server) dispatchLocked(g *group) {
	if s.closed {
		return
	}
	limit := s.limitOf(g)
	startedAny := false
	for len(g.queue) > 0 && (limit < 0 || g.running < limit) {
		ev := g.queue[0]
		g.queue = g.queue[1:]
		g.running++
		ev.status = statusRunning
		startedAny = true
		s.wg.Add(1)
		go s.runEvent(ev)
	}
	// Gradio re-sends estimations to every waiting event; beyond a few hundred
	// that is quadratic work for no test value, so the tail is skipped.
	if startedAny && len(g.queue) <= maxRebroadcast {
		for i, ev := range g.queue {
			s.estimationLocked(ev, i)
		}
	}
}

const maxRebroadcast = 200

// errJoin is a join refused with an HTTP status and detail.
type errJoin struct {
	status int
	detail any
	plain  bool   // text/plain body (500 like Starlette)
	trace  string // with plain: the body instead of the status text
}

func (e *errJoin) Error() string { return fmt.Sprint(e.detail) }

func (e *errJoin) write(w http.ResponseWriter) {
	if e.plain {
		if e.trace != "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(e.status)
			_, _ = w.Write([]byte(e.trace))
			return
		}
		internalError(w, e.status)
		return
	}
	detail(w, e.status, e.detail)
}

// uncaught is the answer to an exception the app's routes do not catch:
// Starlette's ServerErrorMiddleware answers 500, with the Python traceback
// as plain text when the FastAPI app runs in debug mode (Gradio 5.0 to 6.8
// always did, gradio/routes.py App.create_app), else "Internal Server
// Error" (4.x, and 6.9 on unless launch(debug=True)). The recorded answers
// are in gradio/testdata/joins.
func (s *Server) uncaught(trace string) *errJoin {
	e := &errJoin{status: 500, detail: "Internal Server Error", plain: true}
	if s.Mode.info().major == 5 {
		e.trace = trace
	}
	return e
}

// The tracebacks of Gradio 5.49.1 for an unknown fn_index on queue/join
// and an unknown api name on /call (its own frames and line numbers; the
// framework frames abridged to the outermost).
const (
	tracebackHead = "Traceback (most recent call last):\n" +
		"  File \"/usr/local/lib/python3.10/site-packages/starlette/middleware/errors.py\", line 164, in __call__\n" +
		"    await self.app(scope, receive, _send)\n"
	keyErrorTrace = tracebackHead +
		"  File \"/usr/local/lib/python3.10/site-packages/gradio/routes.py\", line 1341, in queue_join\n" +
		"    return await queue_join_helper(body, request, username)\n" +
		"  File \"/usr/local/lib/python3.10/site-packages/gradio/routes.py\", line 1359, in queue_join_helper\n" +
		"    success, event_id, state = await blocks._queue.push(\n" +
		"  File \"/usr/local/lib/python3.10/site-packages/gradio/queueing.py\", line 289, in push\n" +
		"    fn = session_state.blocks_config.fns[body.fn_index]\n" +
		"KeyError: %d\n"
	fnInferTrace = tracebackHead +
		"  File \"/usr/local/lib/python3.10/site-packages/gradio/routes.py\", line 1324, in simple_predict_post\n" +
		"    fn = route_utils.get_fn(\n" +
		"  File \"/usr/local/lib/python3.10/site-packages/gradio/route_utils.py\", line 257, in get_fn\n" +
		"    raise FnIndexInferError(\n" +
		"gradio.route_utils.FnIndexInferError: Could not infer function index for API name: %s\n"
)

// joinOpts says how an event is created.
type joinOpts struct {
	simple  bool // /call: full values
	v0      bool // sse v0: data after send_data, own stream
	private bool // /run: own message queue, not queued behind others
}

// enqueue creates and queues an event (queue/join, /call, v0 join, /run).
// An empty hash means the event's own id (as /call without session_hash).
func (s *Server) enqueue(r *http.Request, hash string, fn int, data []json.RawMessage, o joinOpts) (*event, error) {
	if !o.private {
		if fail, st := s.takeFault(func(k *Knobs) *int { return &k.FailJoin }); fail {
			return nil, &errJoin{status: st, detail: http.StatusText(st), plain: true}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, &errJoin{status: 503, detail: "Queue is stopped."}
	}
	if fn < 0 || fn >= len(s.groups) {
		// Queue.push looks the function up by id: a KeyError nobody
		// catches (see uncaught).
		return nil, s.uncaught(fmt.Sprintf(keyErrorTrace, fn))
	}
	size := s.queueSizeLocked()
	if !o.private && (s.knobs.QueueFull || (s.knobs.MaxQueueSize > 0 && size >= s.knobs.MaxQueueSize)) {
		max := s.knobs.MaxQueueSize
		if s.knobs.QueueFull && size < max {
			size = max
		}
		return nil, &errJoin{status: 503, detail: fmt.Sprintf("Queue is full. Max size is %d and size is %d.", max, size)}
	}
	g := s.groups[fn]
	id := randHex(16)
	if hash == "" {
		hash = id
	}
	ctx, cancel := context.WithCancel(s.baseCtx)
	ev := &event{id: id, fnIndex: fn, ep: g.ep, group: g, data: data, root: rootURL(r),
		simple: o.simple, v0: o.v0, alive: true, ctx: ctx, cancel: cancel, header: r.Header.Clone()}
	ev.sess = s.sessionLocked(hash)
	if o.v0 || o.private {
		ev.q = &simSession{hash: hash, wake: make(chan struct{}, 1), pending: map[string]bool{}, hasQueue: true}
	} else {
		ev.q = ev.sess
		ev.sess.hasQueue = true
	}
	if o.v0 {
		ev.v0data = make(chan []json.RawMessage, 1)
	}
	ev.q.pending[ev.id] = true
	s.events[ev.id] = ev
	if o.private {
		g.running++
		ev.status = statusRunning
		s.wg.Add(1)
		go s.runEvent(ev)
		return ev, nil
	}
	g.queue = append(g.queue, ev)
	s.estimationLocked(ev, len(g.queue)-1)
	s.dispatchLocked(g)
	return ev, nil
}

// predictBody is Gradio's PredictBody.
type predictBody struct {
	Data        []json.RawMessage `json:"data"`
	FnIndex     *int              `json:"fn_index"`
	SessionHash *string           `json:"session_hash"`
	EventID     *string           `json:"event_id"`
}

// decodeBody decodes a JSON body the way FastAPI validates it; a failure is
// a 422 with a pydantic-style detail list.
func decodeBody(r *http.Request, requireData bool) (*predictBody, map[string]json.RawMessage, error) {
	raw, err := readAllLimit(r, 64<<20)
	if err != nil {
		return nil, nil, &errJoin{status: 400, detail: "There was an error parsing the body"}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, nil, &errJoin{status: 422, detail: []obj{{{"type", "json_invalid"}, {"loc", []any{"body", 0}},
			{"msg", "JSON decode error"}, {"input", obj{}}, {"ctx", obj{{"error", "Expecting value"}}}}}}
	}
	var b predictBody
	d, hasData := m["data"]
	if requireData && !hasData {
		return nil, nil, &errJoin{status: 422, detail: []obj{{{"type", "missing"}, {"loc", []any{"body", "data"}},
			{"msg", "Field required"}, {"input", json.RawMessage(raw)}}}}
	}
	if hasData {
		if err := json.Unmarshal(d, &b.Data); err != nil || (string(d) == "null" && requireData) {
			return nil, nil, &errJoin{status: 422, detail: []obj{{{"type", "list_type"}, {"loc", []any{"body", "data"}},
				{"msg", "Input should be a valid list"}, {"input", d}}}}
		}
	}
	if v, ok := m["fn_index"]; ok && string(v) != "null" {
		var n int
		if err := json.Unmarshal(v, &n); err != nil {
			return nil, nil, &errJoin{status: 422, detail: []obj{{{"type", "int_parsing"}, {"loc", []any{"body", "fn_index"}},
				{"msg", "Input should be a valid integer"}, {"input", v}}}}
		}
		b.FnIndex = &n
	}
	for _, f := range []struct {
		k string
		p **string
	}{{"session_hash", &b.SessionHash}, {"event_id", &b.EventID}} {
		if v, ok := m[f.k]; ok && string(v) != "null" {
			var str string
			if err := json.Unmarshal(v, &str); err != nil {
				return nil, nil, &errJoin{status: 422, detail: []obj{{{"type", "string_type"}, {"loc", []any{"body", f.k}},
					{"msg", "Input should be a valid string"}, {"input", v}}}}
			}
			*f.p = &str
		}
	}
	return &b, m, nil
}

func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) {
	b, _, err := decodeBody(r, true)
	if err != nil {
		err.(*errJoin).write(w)
		return
	}
	if b.SessionHash == nil {
		detail(w, 400, "Session hash not found.")
		return
	}
	if b.FnIndex == nil {
		detail(w, 400, "No function index provided.")
		return
	}
	ev, err := s.enqueue(r, *b.SessionHash, *b.FnIndex, b.Data, joinOpts{})
	if err != nil {
		err.(*errJoin).write(w)
		return
	}
	writeJSON(w, 200, obj{{"event_id", ev.id}})
}

// startSSE starts a queue/data or call stream with Gradio's headers.
func startSSE(w http.ResponseWriter) *sse.Writer {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	return sse.Start(w)
}

// encode renders a message for the /queue/data wire of the server's mode.
func (s *Server) encode(m *message) []byte {
	o := obj{{"msg", m.kind}}
	switch m.kind {
	case msgHeartbeat, msgClose:
		if s.Mode.major() >= 5 || m.kind == msgClose {
			o = o.set("event_id", nil)
		}
	case msgUnexpected:
		if s.Mode.major() >= 5 {
			o = o.set("event_id", nil)
		}
	default:
		if s.Mode.atLeast(protoV1) || (m.kind == msgSendData && s.Mode.major() >= 4) {
			o = o.set("event_id", m.eventID)
		}
	}
	o = append(o, m.body...)
	b := mustMarshal(o)
	if s.Mode.pythonStyle() {
		b = pythonJSON(b)
	}
	return b
}

func (s *Server) unexpected(text string, notFound bool) *message {
	body := obj{{"message", text}}
	if s.Mode.major() >= 5 || notFound {
		body = body.set("session_not_found", notFound)
	}
	return &message{kind: msgUnexpected, body: body.set("success", false)}
}

// takeMsg pops the next message of sess, waiting up to the heartbeat timer.
// It returns (nil, nil) on a heartbeat tick.
func (s *Server) nextMsg(ctx context.Context, sess *simSession, hb <-chan time.Time) (*message, error) {
	return s.nextMsgOf(ctx, sess, hb, "")
}

// nextMsgOf is nextMsg for the stream of one event (only != ""), as
// Gradio's GET call/{api}/{event_id} is: it takes that event's messages
// and leaves the session's others to their own streams.
func (s *Server) nextMsgOf(ctx context.Context, sess *simSession, hb <-chan time.Time, only string) (*message, error) {
	for {
		s.mu.Lock()
		if sess.stopped {
			s.mu.Unlock()
			return s.unexpected("Server stopped unexpectedly.", false), errStopped
		}
		if i := nextIndex(sess.msgs, only); i >= 0 {
			m := sess.msgs[i]
			sess.msgs = append(sess.msgs[:i:i], sess.msgs[i+1:]...)
			if m.kind == msgCompleted {
				// Gradio takes the completion off the queue and drops its
				// event from the pending set in one turn of its event
				// loop: neither a join nor a cancel comes in between.
				m.drained = s.completedLocked(sess, m.eventID)
			}
			s.mu.Unlock()
			return m, nil
		}
		if sess.ended {
			s.mu.Unlock()
			return nil, errEnded
		}
		s.mu.Unlock()
		select {
		case <-sess.wake:
		case <-hb:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.baseCtx.Done():
			return s.unexpected("Server stopped unexpectedly.", false), errStopped
		}
	}
}

// nextIndex is the index of the first message of msgs for event only (or
// of the session as a whole), or of the first message when only is "";
// -1 when there is none.
func nextIndex(msgs []*message, only string) int {
	for i, m := range msgs {
		if only == "" || m.eventID == only || m.eventID == "" {
			return i
		}
	}
	return -1
}

var (
	errStopped = errors.New("server stopped")
	errEnded   = errors.New("stream ended")
)

// completedLocked removes a completed event from the session's pending set
// and reports whether none remain.
func (s *Server) completedLocked(sess *simSession, id string) bool {
	delete(sess.pending, id)
	return len(sess.pending) == 0
}

// dropSessionLocked is Gradio's clean_events on a dropped stream: queued
// events are removed, running ones die, the message queue is deleted.
// Gradio 6 keeps the queued events (measured on 6.25.0: a session's
// queued calls outlive a dropped stream; its cancel removes them).
//
// With IgnoresDroppedStreams (Gradio 4.20.1) nothing is dropped.
func (s *Server) dropSessionLocked(sess *simSession) {
	if s.IgnoresDroppedStreams {
		return
	}
	kept := map[string]bool{}
	for id, ev := range s.events {
		if ev.q != sess {
			continue
		}
		if ev.status == statusQueued && s.Mode == Gradio6 {
			kept[id] = true
			continue
		}
		if ev.status == statusQueued {
			ev.group.remove(ev)
			ev.status = statusDone
			delete(s.events, id)
		}
		ev.kill()
	}
	sess.msgs = nil
	sess.pending = kept
	sess.hasQueue = len(kept) > 0
}

func (s *Server) handleData(w http.ResponseWriter, r *http.Request) {
	hash := r.URL.Query().Get("session_hash")
	s.mu.Lock()
	sess := s.sessions[hash]
	known := sess != nil && sess.hasQueue
	s.mu.Unlock()
	sw := startSSE(w)
	if !known {
		_ = sw.Data(s.encode(s.unexpected("404: Not Found", true)))
		return
	}
	s.streamSession(w, r, sw, sess, "")
}

// streamSession runs a /queue/data (or /call, or v0) stream of sess. When
// call is true, messages are translated to the /call event format.
// callEvent names the event of a GET call/{api}/{event_id} stream (which
// ends with that event's completion); "" is a session's queue/data stream.
func (s *Server) streamSession(w http.ResponseWriter, r *http.Request, sw *sse.Writer, sess *simSession, callEvent string) {
	call := callEvent != ""
	ctx := r.Context()
	interval := s.heartbeatInterval()
	hb := time.NewTimer(interval)
	defer hb.Stop()
	clean := false
	defer func() {
		if !clean {
			s.mu.Lock()
			s.dropSessionLocked(sess)
			s.mu.Unlock()
		}
	}()
	for {
		m, err := s.nextMsgOf(ctx, sess, hb.C, callEvent)
		if errors.Is(err, errStopped) {
			s.writeMsg(sw, m, call)
			clean = true
			return
		}
		if errors.Is(err, errEnded) {
			clean = true
			return
		}
		if err != nil {
			return // client went away: drop the session's events
		}
		if m == nil { // heartbeat tick
			if call {
				_ = sw.Event("heartbeat", []byte("null"))
			} else {
				_ = sw.Data(s.encode(&message{kind: msgHeartbeat}))
			}
			hb.Reset(interval)
			if sw.Err() != nil {
				return
			}
			continue
		}
		if s.Mode.major() < 5 {
			hb.Reset(interval) // 4.x beats only after silence; 5.x at a fixed rate
		}
		var stopAfter bool
		if m.drained && s.Mode.atLeast(protoV3) && !call {
			// The last completion and close_stream go out in one write, as
			// Gradio yields them in one turn of its event loop: the client
			// reads close_stream before it can act on the completion. Apart,
			// a client's next join could be answered between them, and
			// @gradio/client would put that call on the closing stream,
			// where nothing is read (the close race, PROTOCOL.md 4.8).
			_ = sw.DataAll(s.encode(m), s.encode(&message{kind: msgClose}))
		} else {
			stopAfter = s.writeMsg(sw, m, call)
		}
		if sw.Err() != nil {
			return
		}
		if m.kind == msgStarts && s.takeCut() {
			s.logf("gradiotest: cutting the data stream of session %s", sess.hash)
			panic(http.ErrAbortHandler) // deferred clean-up drops the events
		}
		if m.kind == msgCompleted && (m.drained || stopAfter || (call && m.eventID == callEvent)) {
			clean = true
			return
		}
		if m.kind == msgQueueFull {
			clean = true
			return
		}
	}
}

// takeCut consumes one CutStream fault.
func (s *Server) takeCut() bool {
	cut, _ := s.takeFault(func(k *Knobs) *int { return &k.CutStream })
	return cut
}

// writeMsg writes one message; for /call streams it translates and reports
// whether the stream should end after it.
func (s *Server) writeMsg(sw *sse.Writer, m *message, call bool) bool {
	if !call {
		_ = sw.Data(s.encode(m))
		return false
	}
	switch m.kind {
	case msgGenerating:
		_ = sw.Event("generating", mustMarshal(m.full))
	case msgCompleted:
		if m.success {
			if m.full == nil {
				_ = sw.Event("complete", []byte("null"))
			} else {
				_ = sw.Event("complete", mustMarshal(m.full))
			}
		} else {
			if s.Mode.major() >= 5 {
				_ = sw.Event("error", mustMarshal(m.errData))
			} else {
				_ = sw.Event("error", []byte("null"))
			}
		}
	case msgUnexpected:
		var msg string
		for _, f := range m.body {
			if f.k == "message" {
				msg, _ = f.v.(string)
			}
		}
		_ = sw.Event("error", mustMarshal(msg))
		return true
	}
	return false
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	var body struct {
		SessionHash string `json:"session_hash"`
		FnIndex     *int   `json:"fn_index"`
		EventID     string `json:"event_id"`
	}
	raw, _ := readAllLimit(r, 1<<20)
	if err := json.Unmarshal(raw, &body); err != nil {
		detail(w, 422, []obj{{{"type", "json_invalid"}, {"loc", []any{"body", 0}}, {"msg", "JSON decode error"}, {"input", obj{}}}})
		return
	}
	s.mu.Lock()
	for _, ev := range s.events {
		if ev.sess.hash != body.SessionHash {
			continue
		}
		target := ev.id == body.EventID
		sameFn := body.FnIndex != nil && ev.fnIndex == *body.FnIndex
		// Like Gradio 4.x-5.x (routes.py cancel_event), only running tasks
		// are cancelled: a queued event stays in the queue and runs later,
		// with nobody waiting for it, unless its session's stream is dropped
		// first (dropSessionLocked). Gradio 6 also removes it from the
		// queue (remove_from_queue; measured on 6.25.0).
		if ev.status == statusRunning && (sameFn || target) {
			ev.kill()
		}
		if target && ev.status == statusQueued && s.Mode == Gradio6 {
			ev.group.remove(ev)
			ev.status = statusDone
			delete(s.events, ev.id)
			ev.kill()
		}
	}
	if sess := s.sessions[body.SessionHash]; sess != nil && sess.pending[body.EventID] && !hasCompletion(sess, body.EventID) {
		out := obj{{"output", obj{}}, {"success", true}}
		if s.Mode.major() >= 5 {
			out = out.set("title", nil)
		}
		if s.Mode == Gradio6 {
			out = out.set("used_cache", nil).set("cache_duration", nil).set("avg_time", nil)
		}
		s.pushLocked(sess, &message{kind: msgCompleted, eventID: body.EventID, body: out, success: true})
	}
	s.mu.Unlock()
	writeJSON(w, 200, obj{{"success", true}})
}

// hasCompletion reports whether a process_completed for id is buffered (the
// job finished just before the cancel arrived).
func hasCompletion(sess *simSession, id string) bool {
	for _, m := range sess.msgs {
		if m.kind == msgCompleted && m.eventID == id {
			return true
		}
	}
	return false
}

func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request, hash string) {
	s.mu.Lock()
	sess := s.sessionLocked(hash)
	sess.beats++
	sess.closedAt = time.Time{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if sess.beats--; sess.beats == 0 {
			sess.closedAt = time.Now() // gr.State now expires after StateTTL
		}
		s.mu.Unlock()
	}()
	sw := startSSE(w)
	t := time.NewTicker(s.heartbeatInterval())
	defer t.Stop()
	for {
		if err := sw.Data([]byte("ALIVE")); err != nil {
			return
		}
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.baseCtx.Done():
			return
		}
	}
}

// readAllLimit reads a request body up to n bytes.
func readAllLimit(r *http.Request, n int64) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(http.MaxBytesReader(nil, r.Body, n))
	return b.Bytes(), err
}
