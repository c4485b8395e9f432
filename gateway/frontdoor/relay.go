package frontdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/sse"
	"github.com/gradiopool/gradiopool/pool"
)

// maxSmallBody bounds the replica answers the gateway reads whole (join,
// cancel, info).
const maxSmallBody = 16 << 20

// detail writes Gradio's error shape {"detail": msg}.
func detail(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"detail": msg})
	_, _ = w.Write(b)
}

// relay writes a replica's answer (status, content type, body) as is.
func relay(w http.ResponseWriter, status int, ctype string, body []byte) {
	if ctype != "" {
		w.Header().Set("Content-Type", ctype)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func readSmall(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, maxSmallBody))
}

// readBody reads a caller's JSON body into a map.
func (f *FrontDoor) readBody(w http.ResponseWriter, r *http.Request) (map[string]json.RawMessage, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, f.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			detail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit))
		} else {
			detail(w, http.StatusBadRequest, "reading the body: "+err.Error())
		}
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		detail(w, http.StatusBadRequest, "the body must be a JSON object")
		return nil, false
	}
	return m, true
}

func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// refusal is a join the replica provably did not take.
type refusal struct {
	status int
	ctype  string
	body   []byte
	err    error
}

// handleJoin is POST queue/join: bind the session (first join), take a
// slot of its replica, forward the join with the backend session hash, and
// keep the slot until the call ends.
func (f *FrontDoor) handleJoin(w http.ResponseWriter, r *http.Request) {
	m, ok := f.readBody(w, r)
	if !ok {
		return
	}
	front := str(m["session_hash"])
	if front == "" {
		detail(w, http.StatusBadRequest, "Session hash not found.")
		return
	}
	if !validHash(front) {
		detail(w, http.StatusBadRequest, "session_hash must be 1-128 letters, digits, '-', '_' or '.'")
		return
	}
	u, err := user(r)
	if err != nil {
		detail(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	s := f.session(ctx, front, f.owner(r), true)
	if s == nil {
		detail(w, http.StatusForbidden, "this session_hash belongs to other credentials")
		return
	}
	f.stats.joins.Add(1)
	endpoint := "fn_index=" + string(m["fn_index"])
	meta := callMeta{endpoint: endpoint, start: f.cfg.Now()}
	if u != "" {
		meta.user = f.cfg.HashUser(u)
	}
	var tried []string
	var last *refusal
	for range len(f.replicas) + 1 {
		slot, b, err := f.slotFor(ctx, s, u, tried, endpoint)
		if err != nil {
			if last != nil {
				break
			}
			if ctx.Err() != nil {
				f.reportCall(meta, CodeClientClosed)
				return
			}
			f.reportCall(meta, CodeNoReplica)
			f.log.Warn("front door: no replica can take a join", slog.String("session", shortHash(front)), slog.Any("error", err))
			f.errDetail(w, http.StatusServiceUnavailable, "gradiopool: no replica can take the call", err)
			return
		}
		meta.replica, meta.wait = b.Replica, f.cfg.Now().Sub(meta.start)
		ref, done := f.join(w, r, s, slot, b, m, meta)
		if done {
			return
		}
		f.stats.refused.Add(1)
		slot.Done(gradio.JoinNotAccepted, ref.err)
		f.log.Warn("front door: replica refused a join", slog.String("replica", b.Replica),
			slog.String("session", shortHash(front)), slog.String("user", f.cfg.HashUser(u)), slog.Any("error", ref.err))
		last = ref
		if len(s.inFlight()) > 0 {
			break // the session's other calls run there: it cannot move
		}
		tried = append(tried, b.Replica)
	}
	f.reportCall(meta, CodeRefused)
	if last == nil {
		detail(w, http.StatusServiceUnavailable, "gradiopool: no replica can take the call")
		return
	}
	if last.body != nil {
		f.replicaAnswer(w, last.status, last.ctype, last.body, "gradiopool: the replicas refused the call")
		return
	}
	f.errDetail(w, http.StatusServiceUnavailable, "gradiopool: the replicas refused the call", last.err)
}

// errDetail answers msg in Gradio's shape, followed by err's text only when
// Config.ShowReplicaErrors is set: pool errors name the replicas (their
// URLs), which callers do not see by default.
func (f *FrontDoor) errDetail(w http.ResponseWriter, status int, msg string, err error) {
	if f.cfg.ShowReplicaErrors && err != nil {
		msg += ": " + err.Error()
	}
	detail(w, status, msg)
}

// slotFor returns a slot for the session's next call: on its replica, or
// on a new one when it is not bound yet or its replica is in tried (it
// refused) or serves another app than the reference; moving loses the
// backend session (and its gr.State).
func (f *FrontDoor) slotFor(ctx context.Context, s *session, u string, tried []string, endpoint string) (*pool.Slot, Binding, error) {
	if err := f.ensureReference(ctx); err != nil {
		return nil, Binding{}, err
	}
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	b := s.binding()
	skip := slices.Clone(tried)
	if b.Replica != "" && !slices.Contains(tried, b.Replica) {
		l, err := f.p.Reserve(ctx, u, pool.ReserveOptions{Replica: b.Replica, Endpoint: endpoint})
		if err == nil {
			cerr := f.checkApp(b.Replica, l.App().Config())
			if cerr == nil {
				return l, b, nil
			}
			l.Release()
			if len(s.inFlight()) > 0 {
				return nil, b, cerr
			}
			// Its app changed to another: move.
		} else {
			var re *pool.ReplicaError
			if ctx.Err() != nil || errors.Is(err, pool.ErrQueueTimeout) || errors.Is(err, pool.ErrQueueFull) ||
				!errors.As(err, &re) || len(s.inFlight()) > 0 {
				return nil, b, err
			}
			// The replica cannot serve (ejected, unreachable): move.
		}
		skip = append(skip, b.Replica)
	}
	// Replicas known to serve another app are skipped; one that is
	// connected again is re-checked first (its app may be fixed now).
	var odd []string
	for n := range f.mismatched() {
		if app := f.p.ConnectedApp(n); app != nil && f.checkApp(n, app.Config()) != nil {
			skip = append(skip, n)
			odd = append(odd, n)
		}
	}
	var l *pool.Slot
	for range len(f.replicas) {
		var err error
		l, err = f.p.Reserve(ctx, u, pool.ReserveOptions{Exclude: skip, Endpoint: endpoint})
		if err != nil {
			if len(odd) > 0 {
				slices.Sort(odd)
				err = fmt.Errorf("%w (not used: %s serve(s) another app than the reference replica)", err, strings.Join(odd, ", "))
			}
			return nil, b, err
		}
		if f.checkApp(l.Replica(), l.App().Config()) == nil {
			break
		}
		odd = append(odd, l.Replica())
		skip = append(skip, l.Replica())
		l.Release()
		l = nil
	}
	if l == nil {
		return nil, b, fmt.Errorf("%w: every replica that took the call serves another app than the reference replica", ErrConfigMismatch)
	}
	nb := Binding{Replica: l.Replica(), Backend: newBackendHash(), Owner: b.Owner}
	if b.Replica != "" {
		f.stats.moved.Add(1)
		s.mu.Lock()
		hadState := s.accepted > 0
		s.mu.Unlock()
		if hadState {
			f.stats.stateLost.Add(1)
		}
		f.log.Warn("front door: session moved to another replica; its gr.State starts empty there",
			slog.String("from", b.Replica), slog.String("to", nb.Replica), slog.String("session", shortHash(s.front)),
			slog.String("user", f.cfg.HashUser(u)), slog.Bool("state_lost", hadState))
	} else {
		f.log.Debug("front door: session bound", slog.String("replica", nb.Replica),
			slog.String("session", shortHash(s.front)), slog.String("user", f.cfg.HashUser(u)))
	}
	s.setBinding(ctx, nb)
	return l, nb, nil
}

// join forwards one join under slot. done means the caller got its
// answer (accepted, or an error that moving would not fix) and the slot's
// outcome is reported; otherwise the replica refused and the caller's join
// may go elsewhere (the caller reports the refusal).
func (f *FrontDoor) join(w http.ResponseWriter, r *http.Request, s *session, slot *pool.Slot, b Binding, m map[string]json.RawMessage, meta callMeta) (*refusal, bool) {
	endpoint := meta.endpoint
	app := slot.App()
	body := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		body[k] = v
	}
	body["session_hash"], _ = json.Marshal(b.Backend)
	if data, ok := m["data"]; ok {
		nd, err := f.localizeFiles(r.Context(), app, b.Replica, data)
		if err != nil {
			var bad *badFileError
			if errors.As(err, &bad) {
				slot.Release()
				detail(w, http.StatusBadRequest, bad.Error())
				return nil, true
			}
			return &refusal{err: fmt.Errorf("sending uploads: %w", err)}, false
		}
		body["data"] = nd
	}
	out, _ := json.Marshal(body)
	// The join must not be cut half-way by a caller that goes away: the
	// app may have queued the call, and its slot must be accounted.
	jctx := context.WithoutCancel(r.Context())
	req, err := app.NewRequest(jctx, http.MethodPost, app.URL("queue/join"), bytes.NewReader(out))
	if err != nil {
		slot.Release()
		detail(w, http.StatusInternalServerError, err.Error())
		return nil, true
	}
	req.Header.Set("Content-Type", "application/json")
	if v := r.Header.Get("X-Gradio-User"); v != "" {
		req.Header.Set("X-Gradio-User", v)
	}
	f.callerHeaders(r, req.Header)
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { sent.Store(i.Err == nil) },
	}))
	resp, err := app.Do(req, true)
	if err != nil {
		if !sent.Load() {
			return &refusal{err: fmt.Errorf("queue/join not sent: %w", err)}, false
		}
		// Sent, no answer: the app may have queued it. Never run twice.
		slot.Release()
		f.stats.lost.Add(1)
		f.reportCall(meta, CodeReplicaLost)
		detail(w, http.StatusBadGateway, "gradiopool: the replica did not answer the join; the call may have been queued there and is not run again")
		return nil, true
	}
	rb, err := readSmall(resp)
	ctype := resp.Header.Get("Content-Type")
	if err != nil {
		slot.Release()
		f.stats.lost.Add(1)
		f.reportCall(meta, CodeReplicaLost)
		detail(w, http.StatusBadGateway, "gradiopool: the replica's answer to the join was cut; the call may have been queued there and is not run again")
		return nil, true
	}
	// One rule for what the answer proves (gradio.ClassifyJoin), the one
	// the pool follows for its own calls.
	var fn int
	fnKnown := json.Unmarshal(m["fn_index"], &fn) == nil && app.Config().HasFn(fn)
	eventID, jerr := gradio.JoinAnswer(resp.StatusCode, rb, fnKnown)
	switch gradio.ClassifyJoin(jerr) {
	case gradio.JoinAccepted:
		slot.Done(gradio.JoinAccepted, nil)
		s.addPending(eventID, slot, meta)
		relay(w, resp.StatusCode, ctype, rb)
		return nil, true
	case gradio.JoinNotAccepted:
		return &refusal{status: resp.StatusCode, ctype: ctype, body: rb, err: jerr}, false
	case gradio.JoinCallerFault:
		// Refused for the caller's input: the caller's answer; another
		// replica would refuse it too, and the replica is not at fault.
		slot.Done(gradio.JoinCallerFault, jerr)
		f.stats.callerFaults.Add(1)
		f.reportCall(meta, CodeBadInput)
		f.log.Info("front door: the app refused a join's input", slog.String("replica", b.Replica),
			slog.String("session", shortHash(s.front)), slog.String("endpoint", endpoint), slog.Any("error", jerr))
		f.callerFault(w, resp.StatusCode, ctype, rb, jerr)
		return nil, true
	}
	// Maybe accepted (a proxy's 504, an answer without an event id): never
	// run again.
	slot.Done(gradio.JoinMaybeAccepted, jerr)
	f.reportCall(meta, CodeReplicaLost)
	f.replicaAnswer(w, resp.StatusCode, ctype, rb,
		"gradiopool: the replica's answer to the join was not Gradio's; the call may have been queued there and is not run again")
	return nil, true
}

// callerFault answers a join the app refused because of what the caller
// sent, as a 4xx in Gradio's shape ({"detail": ...}). The replica's own
// answer is relayed when it is already that (Gradio's 400/422 details), or
// when Config.ShowReplicaErrors is set; a 500 for an unknown fn_index (a
// Python traceback from Gradio 5.0 to 6.8) never reaches the caller
// otherwise.
func (f *FrontDoor) callerFault(w http.ResponseWriter, status int, ctype string, body []byte, err error) {
	switch {
	case f.cfg.ShowReplicaErrors:
		relay(w, status, ctype, body)
	case status >= 400 && status < 500 && gradioDetail(body):
		relay(w, status, "application/json", body)
	case errors.Is(err, gradio.ErrUnknownEndpoint):
		detail(w, http.StatusBadRequest, "gradiopool: the app has no function with this fn_index")
	case status >= 400 && status < 500:
		detail(w, status, "gradiopool: the app refused the call's input")
	default:
		detail(w, http.StatusBadRequest, "gradiopool: the app refused the call's input")
	}
}

// replicaAnswer passes a replica's non-200 answer on: as is when it is
// Gradio's {"detail": ...} shape or Config.ShowReplicaErrors is set, else
// as msg with the replica's status (its body may hold a traceback or the
// replica's address).
func (f *FrontDoor) replicaAnswer(w http.ResponseWriter, status int, ctype string, body []byte, msg string) {
	if f.cfg.ShowReplicaErrors || (status >= 200 && status < 300) || gradioDetail(body) {
		relay(w, status, ctype, body)
		return
	}
	detail(w, status, msg)
}

// gradioDetail reports whether body is Gradio's error shape: a JSON object
// with a "detail" (FastAPI's HTTPException and validation answers).
func gradioDetail(body []byte) bool {
	var v map[string]json.RawMessage
	if json.Unmarshal(body, &v) != nil {
		return false
	}
	_, ok := v["detail"]
	return ok
}

func excerpt(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return strings.TrimSpace(string(b))
}

// startSSE starts the caller's queue/data or heartbeat stream.
func startSSE(w http.ResponseWriter) *sse.Writer {
	w.Header().Set("Cache-Control", "no-cache")
	return sse.Start(w)
}

// sessionNotFound is what Gradio streams for an unknown session.
var sessionNotFound = []byte(`{"msg":"unexpected_error","event_id":null,"message":"404: Not Found","session_not_found":true,"success":false}`)

// maxQuietReopens bounds the backend streams reopened in a row that
// delivered nothing while the caller's calls were pending.
const maxQuietReopens = 2

// handleData is GET queue/data: the caller's stream, relayed from its
// backend session's stream with event ids and messages intact (file URLs
// rewritten to the gateway). Each process_completed frees its call's slot.
//
// When the replica ends its stream (close_stream) while a call of the
// session is in flight — a join accepted just after the replica decided
// to close — the gateway does not pass close_stream on: it reopens the
// backend stream, where the replica kept that call's messages, and goes
// on relaying. This closes Gradio's close race (the replica decides to
// close the stream of a session with no call left just before a new join
// of it arrives) for the caller: @gradio/client keeps no stream open for a call whose join was
// answered before it had seen the close_stream, and that call would never
// complete.
func (f *FrontDoor) handleData(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	front := r.URL.Query().Get("session_hash")
	var s *session
	if validHash(front) {
		s = f.session(ctx, front, f.owner(r), false)
	}
	if s == nil || s.binding().Replica == "" {
		rc := startSSE(w)
		_ = rc.Data(sessionNotFound)
		return
	}
	defer s.stream()()
	b := s.binding()
	app, err := f.appFor(ctx, b.Replica)
	if err != nil {
		f.failPending(w, startSSE(w), s, b, err)
		return
	}
	var rc *sse.Writer // nil until the caller's stream started
	quiet := 0
	for {
		resp, err := f.openData(ctx, r, app, b)
		if err != nil {
			if ctx.Err() != nil {
				s.releaseAll(CodeClientClosed)
				f.foreignEnd(s.front, "")
				return
			}
			if rc == nil {
				rc = startSSE(w)
			}
			f.failPending(w, rc, s, b, err)
			return
		}
		if resp.StatusCode != http.StatusOK {
			rb, _ := io.ReadAll(io.LimitReader(resp.Body, maxSmallBody))
			resp.Body.Close()
			if resp.StatusCode >= 500 || rc != nil {
				if rc == nil {
					rc = startSSE(w)
				}
				f.failPending(w, rc, s, b, fmt.Errorf("queue/data %d %s", resp.StatusCode, excerpt(rb)))
				return
			}
			relay(w, resp.StatusCode, resp.Header.Get("Content-Type"), rb)
			return
		}
		if rc == nil {
			rc = startSSE(w)
		}
		relayed, reopen, done, cause := f.relayData(w, rc, r, s, app, b, resp)
		resp.Body.Close()
		if done {
			return
		}
		if !reopen {
			if ctx.Err() != nil || cause == nil {
				// The caller went away: the replica drops the session's
				// calls when its stream closes (Gradio's rule), so their
				// slots are free.
				s.releaseAll(CodeClientClosed)
				f.foreignEnd(s.front, "")
				return
			}
			f.failPending(w, rc, s, b, cause)
			return
		}
		if relayed > 0 {
			quiet = 0
		} else if quiet++; quiet > maxQuietReopens {
			f.failPending(w, rc, s, b, errors.New("the replica ends the session's stream while its calls are pending"))
			return
		}
	}
}

// openData opens the backend session's queue/data stream.
func (f *FrontDoor) openData(ctx context.Context, r *http.Request, app *gradio.Client, b Binding) (*http.Response, error) {
	q := url.Values{"session_hash": {b.Backend}}
	req, err := app.NewRequest(ctx, http.MethodGet, app.URL("queue/data")+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	f.callerHeaders(r, req.Header)
	return app.Do(req, true)
}

// relayData relays one backend stream to the caller. It returns how many
// event messages it relayed, and: done when the caller's stream is over
// (close_stream passed on), reopen when the backend closed while calls
// are pending, else the cause of the end (nil: the caller went away).
func (f *FrontDoor) relayData(w http.ResponseWriter, rc *sse.Writer, r *http.Request, s *session, app *gradio.Client, b Binding, resp *http.Response) (relayed int, reopen, done bool, cause error) {
	rw := f.rewriter(app, b.Replica, f.root(r))
	rd := sse.NewReader(resp.Body)
	defer rd.Release()
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the replica ended the stream without close_stream")
			}
			return relayed, false, false, err
		}
		var msg struct {
			Msg     string  `json:"msg"`
			EventID *string `json:"event_id"`
			Success *bool   `json:"success"` // process_completed: false when the app raised (gr.Error)
		}
		_ = json.Unmarshal(ev.Data, &msg)
		if msg.Msg == "close_stream" && len(s.inFlight()) > 0 {
			return relayed, true, false, nil
		}
		if werr := rc.Data(rw.rewrite(ev.Data)); werr != nil {
			return relayed, false, false, nil // the caller went away
		}
		if msg.EventID != nil {
			relayed++
		}
		switch msg.Msg {
		case "process_completed":
			code := ""
			if msg.Success != nil && !*msg.Success {
				code = CodeAppError
			}
			if msg.EventID != nil && !s.complete(*msg.EventID, code) {
				f.foreignEnd(s.front, *msg.EventID)
			}
		case "close_stream":
			return relayed, false, true, nil
		}
	}
}

// failPending reports every call in flight of s as lost (Gradio's error
// shape: process_completed with success false), frees their slots and
// closes the stream. The calls are never run again.
func (f *FrontDoor) failPending(w http.ResponseWriter, rc *sse.Writer, s *session, b Binding, cause error) {
	ids := s.inFlight()
	for _, id := range ids {
		msg := "gradiopool: the connection to the replica was lost while it ran this call; the call is not run again"
		if f.cfg.ShowReplicaErrors {
			msg = fmt.Sprintf("gradiopool: the connection to replica %s was lost while it ran this call (%v); the call is not run again", b.Replica, cause)
		}
		rec, _ := json.Marshal(map[string]any{
			"msg": "process_completed", "event_id": id,
			"output":  map[string]any{"error": msg, "visible": true, "title": "Error"},
			"success": false, "title": "Error",
		})
		_ = rc.Data(rec)
		s.complete(id, CodeReplicaLost)
		f.stats.lost.Add(1)
	}
	if len(ids) > 0 {
		f.log.Warn("front door: replica lost calls in flight", slog.String("replica", b.Replica),
			slog.String("session", shortHash(s.front)), slog.Int("calls", len(ids)), slog.Any("error", cause))
	}
	_ = rc.Data([]byte(`{"msg":"close_stream","event_id":null}`))
	f.foreignEnd(s.front, "")
}

// handleHeartbeat is GET heartbeat/{session_hash}: the gateway's own ALIVE
// stream. It keeps the caller's session (open stream: it does not expire).
// JS clients open it at connect, before any join.
func (f *FrontDoor) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	front := r.PathValue("session_hash")
	if !validHash(front) {
		detail(w, http.StatusNotFound, "Not Found")
		return
	}
	s := f.session(r.Context(), front, f.owner(r), true)
	if s == nil {
		detail(w, http.StatusForbidden, "this session_hash belongs to other credentials")
		return
	}
	defer s.stream()()
	rc := startSSE(w)
	t := time.NewTicker(f.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if rc.Data([]byte("ALIVE")) != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-f.ctx.Done():
			return
		case <-f.drain:
			return
		case <-t.C:
		}
	}
}

// handleCancel is POST cancel: forwarded to the session's replica with its
// backend session hash.
func (f *FrontDoor) handleCancel(w http.ResponseWriter, r *http.Request) {
	m, ok := f.readBody(w, r)
	if !ok {
		return
	}
	front := str(m["session_hash"])
	var s *session
	if validHash(front) {
		s = f.session(r.Context(), front, f.owner(r), false)
	}
	if s == nil || s.binding().Replica == "" {
		relay(w, http.StatusOK, "application/json", []byte(`{"success":true}`))
		return
	}
	b := s.binding()
	app, err := f.appFor(r.Context(), b.Replica)
	if err != nil {
		detail(w, http.StatusBadGateway, err.Error())
		return
	}
	m["session_hash"], _ = json.Marshal(b.Backend)
	out, _ := json.Marshal(m)
	req, err := app.NewRequest(r.Context(), http.MethodPost, app.URL("cancel"), bytes.NewReader(out))
	if err != nil {
		detail(w, http.StatusInternalServerError, err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json")
	f.callerHeaders(r, req.Header)
	resp, err := app.Do(req, true)
	if err != nil {
		detail(w, http.StatusBadGateway, "gradiopool: cancel: "+err.Error())
		return
	}
	rb, _ := readSmall(resp)
	relay(w, resp.StatusCode, resp.Header.Get("Content-Type"), rb)
}

// handleReset is POST reset: a no-op in Gradio 6 and only cleanup in 4.x,
// answered by the gateway.
func (f *FrontDoor) handleReset(w http.ResponseWriter, r *http.Request) {
	if _, ok := f.readBody(w, r); !ok {
		return
	}
	relay(w, http.StatusOK, "application/json", []byte(`{"success":true}`))
}

// refConfig is the reference app whose config and /info the gateway serves.
type refConfig struct {
	app     *gradio.Client
	replica string
	info    map[string][]byte // /info bodies by query, for app
}

// reference returns the app whose config the front door serves: the
// first replica in pool order that connects and serves the reference app
// (see fingerprint.go).
func (f *FrontDoor) reference(ctx context.Context) (*gradio.Client, string, error) {
	if err := f.ensureReference(ctx); err != nil {
		return nil, "", err
	}
	var errs []error
	for _, n := range f.replicas {
		app, err := f.p.App(ctx, n)
		if err != nil {
			if ctx.Err() != nil {
				return nil, "", ctx.Err()
			}
			errs = append(errs, err)
			continue
		}
		if err := f.checkApp(n, app.Config()); err != nil {
			errs = append(errs, err)
			continue
		}
		return app, n, nil
	}
	// No connected replica serves the reference app any more.
	if cs := f.connected(); len(cs) > 0 {
		f.fps.adoptMu.Lock()
		f.adopt(cs, "no connected replica serves the old one any more")
		f.fps.adoptMu.Unlock()
		for _, n := range f.replicas {
			if app := f.p.ConnectedApp(n); app != nil && f.checkApp(n, app.Config()) == nil {
				return app, n, nil
			}
		}
	}
	return nil, "", fmt.Errorf("no replica is connected: %w", errors.Join(errs...))
}

var appIDRe = regexp.MustCompile(`"app_id":\s*\d+`)

// handleConfig is GET /config: the replicas' config, with root and URLs
// pointing at the gateway as the caller reached it and the gateway's own
// app_id.
func (f *FrontDoor) handleConfig(w http.ResponseWriter, r *http.Request) {
	app, _, err := f.reference(r.Context())
	if err != nil {
		detail(w, http.StatusServiceUnavailable, "gradiopool: "+err.Error())
		return
	}
	out := replaceRoots(app.Config().Raw, appRoots(app), f.root(r))
	out = appIDRe.ReplaceAll(out, []byte(`"app_id":`+strconv.FormatUint(f.appID, 10)))
	relay(w, http.StatusOK, "application/json", out)
}

// handleInfo is GET info: the reference replica's /info (cached per query
// string), URLs rewritten.
func (f *FrontDoor) handleInfo(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	app, replica, err := f.reference(ctx)
	if err != nil {
		detail(w, http.StatusServiceUnavailable, "gradiopool: "+err.Error())
		return
	}
	q := r.URL.RawQuery
	f.refMu.Lock()
	if f.ref.app != app {
		f.ref = refConfig{app: app, replica: replica, info: map[string][]byte{}}
	}
	body, ok := f.ref.info[q]
	f.refMu.Unlock()
	if !ok {
		u := app.URL("info")
		if q != "" {
			u += "?" + q
		}
		req, err := app.NewRequest(ctx, http.MethodGet, u, nil)
		if err != nil {
			detail(w, http.StatusInternalServerError, err.Error())
			return
		}
		f.callerHeaders(r, req.Header)
		resp, err := app.Do(req, true)
		if err != nil {
			detail(w, http.StatusBadGateway, "gradiopool: info: "+err.Error())
			return
		}
		rb, err := readSmall(resp)
		if err != nil || resp.StatusCode != http.StatusOK {
			relay(w, resp.StatusCode, resp.Header.Get("Content-Type"), rb)
			return
		}
		body = rb
		f.refMu.Lock()
		if f.ref.app == app && len(f.ref.info) < 16 {
			f.ref.info[q] = body
		}
		f.refMu.Unlock()
	}
	relay(w, http.StatusOK, "application/json", replaceRoots(body, appRoots(app), f.root(r)))
}

// handleAppID is GET app_id: the gateway's own id, stable while it runs.
func (f *FrontDoor) handleAppID(w http.ResponseWriter, r *http.Request) {
	relay(w, http.StatusOK, "application/json", []byte(`{"app_id":`+strconv.FormatUint(f.appID, 10)+`}`))
}

// root is the gateway's root URL as the caller reached it.
func (f *FrontDoor) root(r *http.Request) string {
	scheme, host := "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if f.cfg.TrustForwarded {
		if p := firstValue(r.Header.Get("X-Forwarded-Proto")); p == "http" || p == "https" {
			scheme = p
		}
		if h := firstValue(r.Header.Get("X-Forwarded-Host")); h != "" && !strings.ContainsAny(h, "/\\ \"'<>") {
			host = h
		}
	}
	return scheme + "://" + host
}

func firstValue(v string) string {
	if i := strings.IndexByte(v, ','); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v)
}

// appRoots are the roots a replica writes into its answers: its base URL
// and the root it computed for the pool's connect.
func appRoots(app *gradio.Client) []string {
	roots := []string{strings.TrimRight(app.BaseURL(), "/")}
	if cr := strings.TrimRight(app.Config().Root, "/"); cr != "" && cr != roots[0] {
		roots = append(roots, cr)
	}
	return roots
}

// replaceRoots replaces every root string prefix in a JSON document with
// the gateway's root.
func replaceRoots(b []byte, roots []string, gw string) []byte {
	for _, rt := range roots {
		if rt == "" {
			continue
		}
		b = bytes.ReplaceAll(b, []byte(`"`+rt), []byte(`"`+gw))
		// code snippets embed the URL inside longer strings
		b = bytes.ReplaceAll(b, []byte(rt+"/"), []byte(gw+"/"))
	}
	return b
}
