package gradio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// streamLinger is how long a data stream stays open without pending calls
// before the client closes it (sse_v3 servers close it themselves right
// after the last completion; this covers cancelled calls the server never
// completes).
const streamLinger = 5 * time.Second

// maxEarly bounds messages buffered for event ids not registered yet.
const maxEarly = 1024

// session is one session hash: its pending calls and the single queue/data
// stream that carries all of their messages.
type session struct {
	app    *app
	hash   string
	ctx    context.Context // ends at Close: streams, heartbeat, pumps
	cancel context.CancelFunc
	wg     sync.WaitGroup // goroutines of this session; Add only under mu with !closed

	mu       sync.Mutex // guards the fields below; no network I/O under it
	pending  map[string]*Job
	early    map[string][]*message // messages for ids whose join has not returned
	nEarly   int
	joining  int  // queue/join requests in flight
	streamOn bool // a runStream goroutine exists
	hbOn     bool // the heartbeat goroutine exists
	// knownQueue: the server holds a message queue for this session (a
	// join succeeded and no session_not_found since), so an sse_v3 stream
	// may be opened before the next join returns.
	knownQueue bool
	closed     bool
	v0seq      int
}

func newSession(a *app) *session {
	ctx, cancel := context.WithCancel(context.Background())
	a.refs.Add(1)
	return &session{app: a, hash: newSessionHash(), ctx: ctx, cancel: cancel, pending: map[string]*Job{}}
}

// goLocked starts f as a tracked goroutine unless the session is closed.
// Callers hold s.mu.
func (s *session) goLocked(f func()) bool {
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

func (s *session) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	jobs := make([]*Job, 0, len(s.pending))
	for _, j := range s.pending {
		jobs = append(jobs, j)
	}
	s.pending = map[string]*Job{}
	s.early = nil
	s.mu.Unlock()
	for _, j := range jobs {
		j.finish(nil, ErrClosed)
	}
	s.cancel()
	s.wg.Wait()
	if s.app.refs.Add(-1) == 0 && s.app.own != nil {
		s.app.own.CloseIdleConnections()
	}
}

// Predict calls endpoint and waits for its final outputs. See Submit for
// endpoint and args; State (and other skip_api) outputs are dropped, as
// the Python client does, and each output is the raw JSON value.
func (c *Client) Predict(ctx context.Context, endpoint string, args ...any) ([]json.RawMessage, error) {
	j, err := c.sess.submit(ctx, endpoint, args, true)
	if err != nil {
		return nil, err
	}
	return j.Wait(ctx)
}

// Submit starts a call and returns once the app accepted it (queue/join
// returned an event id; for a v0 app, once the queue answered), or with an
// error, which means the app did NOT accept the call (nothing to cancel).
//
// endpoint is an api_name with or without leading "/" ("upper", "/upper")
// or FnIndex(i). args are the endpoint's parameters in order, without its
// State inputs (sent as null for the server to fill from the session);
// trailing parameters with defaults may be omitted, and a final Kwargs
// passes parameters by name (both use /info, fetched once). Arguments are
// JSON-encoded; Upload values (File, FileReader, FileURL), at any depth of
// []any / map[string]any, are uploaded and replaced by FileData.
//
// ctx governs the whole job: when it ends before completion the client
// POSTs /cancel (detached, bounded by the cancel timeout) and the job ends
// with ctx's error. The queue/join request itself runs detached from ctx,
// bounded by the header timeout, so that a call the app accepted is never
// left running uncancelled.
func (c *Client) Submit(ctx context.Context, endpoint string, args ...any) (*Job, error) {
	return c.sess.submit(ctx, endpoint, args, false)
}

// submit starts a call; quiet jobs (Predict) keep no event history.
func (s *session) submit(ctx context.Context, endpoint string, args []any, quiet bool) (*Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := s.app.cfg
	dep, err := cfg.Endpoint(endpoint)
	if err != nil {
		return nil, err
	}
	var info *EndpointInfo
	if needsInfo(cfg, dep, args) || s.app.set.oauthToken != "" {
		ai, err := s.app.apiInfo(ctx)
		if err != nil {
			return nil, err
		}
		info = ai.Endpoint(dep)
	}
	data, err := buildData(cfg, dep, endpoint, info, args)
	if err != nil {
		return nil, err
	}
	var oauth *string
	if tok := s.app.set.oauthToken; tok != "" && info != nil && info.OAuthToken != "" {
		t := tok.reveal()
		oauth = &t
	}
	for i, v := range data {
		if v == nil {
			continue
		}
		n, changed, err := s.prepareArgs(ctx, endpoint, v)
		if err != nil {
			return nil, err
		}
		if changed {
			data[i] = n
		}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	switch cfg.Protocol {
	case ProtocolSSE:
		return s.submitV0(ctx, dep, endpoint, data, oauth, quiet)
	case ProtocolWS:
		return s.submitWS(ctx, dep, endpoint, data, quiet)
	}
	return s.submitQueued(ctx, dep, endpoint, data, oauth, quiet)
}

func needsInfo(cfg *Config, d *Dependency, args []any) bool {
	if n := len(args); n > 0 {
		if _, ok := args[n-1].(Kwargs); ok {
			return true
		}
	}
	np := 0
	for _, id := range d.Inputs {
		if !cfg.IsState(id) {
			np++
		}
	}
	return len(args) < np
}

// joinBody is the queue/join payload, shaped like the JS client's.
type joinBody struct {
	Data        []any   `json:"data"`
	EventData   any     `json:"event_data"`
	FnIndex     int     `json:"fn_index"`
	TriggerID   any     `json:"trigger_id"`
	SessionHash string  `json:"session_hash"`
	EventID     *string `json:"event_id,omitempty"`
	OAuthToken  *string `json:"oauth_token,omitempty"`
}

func (s *session) submitQueued(ctx context.Context, dep *Dependency, endpoint string, data []any, oauth *string, quiet bool) (*Job, error) {
	body, err := json.Marshal(joinBody{Data: data, FnIndex: dep.FnIndex, SessionHash: s.hash, OAuthToken: oauth})
	if err != nil {
		return nil, &ArgumentError{Endpoint: endpoint, Msg: "arguments are not JSON-encodable", Err: err}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.joining++
	s.startHeartbeatLocked()
	if s.knownQueue && s.app.cfg.Protocol == ProtocolSSEv3 && !s.streamOn && !s.app.noPreopen.Load() {
		// Open the stream while the join is in flight: it saves a round
		// trip per call. Messages that beat the join's answer are buffered
		// (s.early); the server keeps a known session's queue waiting.
		s.streamOn = s.goLocked(s.runStream)
	}
	s.mu.Unlock()
	eventID, err := s.join(ctx, body)
	j := newJob(s, ctx, dep, endpoint)
	j.id, j.quiet = eventID, quiet
	s.mu.Lock()
	s.joining--
	if err == nil && s.closed {
		err = ErrClosed
	}
	if err != nil {
		if s.joining == 0 {
			s.early, s.nEarly = nil, 0
		}
		closed := s.closed
		s.mu.Unlock()
		if eventID != "" {
			if closed {
				// Accepted while closing: cancel it before saying it was not.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.app.set.cancelTimeout)
				_ = s.sendCancel(cctx, j)
				cancel()
			} else {
				s.cancelDetached(j)
			}
		}
		return nil, err
	}
	s.pending[eventID] = j
	s.knownQueue = true
	if msgs := s.early[eventID]; msgs != nil {
		delete(s.early, eventID)
		s.nEarly -= len(msgs)
		for _, m := range msgs {
			j.handle(m)
		}
	}
	if s.joining == 0 {
		s.early, s.nEarly = nil, 0
	}
	s.ensureStreamLocked()
	s.mu.Unlock()
	if ctx.Err() != nil {
		// The caller gave up while the join was in flight.
		s.abort(j, ctx.Err())
		return nil, ctx.Err()
	}
	j.watch(ctx)
	return j, nil
}

// join POSTs queue/join detached from the caller's cancellation.
func (s *session) join(ctx context.Context, body []byte) (string, error) {
	a := s.app
	req, err := a.newRequest(context.WithoutCancel(ctx), http.MethodPost, a.api("queue/join"), bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header["Content-Type"] = jsonCT
	req.Header["X-Gradio-User"] = apiUser
	// Whether the request was written in full decides whether a failure
	// proves the app never got the call (a pool may then run it elsewhere)
	// or leaves it possibly queued (it must not be run twice).
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { sent.Store(i.Err == nil) },
	}))
	resp, err := a.do(req, true)
	if err != nil {
		return "", &ConnectionLostError{MaybeAccepted: sent.Load(), Err: fmt.Errorf("queue/join: %w", err)}
	}
	rb, err := readBody(resp)
	if err != nil {
		// The app answered; with a 200 it has queued the job.
		return "", &ConnectionLostError{MaybeAccepted: true, Err: fmt.Errorf("queue/join: %w", err)}
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var v struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(rb, &v); err != nil || v.EventID == "" {
			return "", &ProtocolError{Op: "queue/join", Body: excerpt(rb), Err: errors.New("no event_id")}
		}
		return v.EventID, nil
	case http.StatusServiceUnavailable:
		return "", joinUnavailable("queue/join", rb)
	case http.StatusTooManyRequests:
		return "", &ProtocolError{Op: "queue/join", StatusCode: resp.StatusCode, Body: excerpt(rb), Err: ErrRateLimited}
	case http.StatusUnprocessableEntity:
		return "", &ArgumentError{Endpoint: "queue/join", Msg: "the app rejected the arguments: " + detail(rb)}
	case http.StatusUnauthorized, http.StatusForbidden:
		return "", &ProtocolError{Op: "queue/join", StatusCode: resp.StatusCode, Body: excerpt(rb), Err: ErrUnauthorized}
	default:
		return "", &ProtocolError{Op: "queue/join", StatusCode: resp.StatusCode, Body: excerpt(rb)}
	}
}

var (
	jsonCT  = []string{"application/json"}
	apiUser = []string{"api"}
	sseAcc  = []string{"text/event-stream"}
)

// joinUnavailable turns a 503 answer to a join into an error. Only Gradio's
// own "Queue is full" answer is ErrQueueFull (the app is busy but healthy);
// any other 503 — a sleeping or crashed Space behind the HF proxy, a stopped
// queue — is a *ProtocolError with the status, which a pool counts against
// the replica instead of treating it as load.
func joinUnavailable(op string, body []byte) error {
	d := detail(body)
	if strings.HasPrefix(d, "Queue is full") {
		return fmt.Errorf("%w: %s", ErrQueueFull, d)
	}
	return &ProtocolError{Op: op, StatusCode: http.StatusServiceUnavailable, Body: excerpt(body)}
}

// detail extracts FastAPI's {"detail": ...} text.
func detail(b []byte) string {
	var v struct {
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(b, &v) == nil && len(v.Detail) > 0 {
		var s string
		if json.Unmarshal(v.Detail, &s) == nil {
			return s
		}
		return excerpt(v.Detail)
	}
	return excerpt(b)
}

// abort ends j because its ctx ended, and cancels it on the server.
func (s *session) abort(j *Job, err error) {
	if s.fail(j, err) {
		s.cancelDetached(j)
	}
}

// cancelDetached sends /cancel in the background, bounded by the cancel
// timeout.
func (s *session) cancelDetached(j *Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.goLocked(func() {
		ctx, cancel := context.WithTimeout(s.ctx, s.app.set.cancelTimeout)
		defer cancel()
		if err := s.sendCancel(ctx, j); err != nil {
			s.app.log.Debug("gradio: cancel failed", "session", s.hash, "event_id", j.ID(), "err", err)
		}
	})
}

// sendCancel POSTs {prefix}/cancel (Gradio 4.29+; earlier apps have no way
// to cancel a queued job from the API) and, for Gradio 4.x, {prefix}/reset.
func (s *session) sendCancel(ctx context.Context, j *Job) error {
	a := s.app
	cfg := a.cfg
	if cfg.Protocol == ProtocolSSE {
		return nil // v0: closing the job's own stream (done by finish) cancels it
	}
	id := j.ID()
	if id == "" || cfg.Protocol != ProtocolSSEv3 || !versionAtLeast(cfg.Version, "4.29") {
		return nil
	}
	body, _ := json.Marshal(map[string]any{"session_hash": s.hash, "fn_index": j.dep.FnIndex, "event_id": id})
	if err := a.postJSON(ctx, "cancel", body); err != nil {
		return err
	}
	if !versionAtLeast(cfg.Version, "5.0") {
		rb, _ := json.Marshal(map[string]string{"event_id": id})
		return a.postJSON(ctx, "reset", rb)
	}
	return nil
}

func (a *app) postJSON(ctx context.Context, p string, body []byte) error {
	req, err := a.newRequest(ctx, http.MethodPost, a.api(p), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header["Content-Type"] = jsonCT
	resp, err := a.do(req, true)
	if err != nil {
		return fmt.Errorf("gradio: %s: %w", p, err)
	}
	rb, _ := readBody(resp)
	if resp.StatusCode != http.StatusOK {
		return &ProtocolError{Op: p, StatusCode: resp.StatusCode, Body: excerpt(rb)}
	}
	return nil
}

// fail ends j with err if it is still running; it reports whether it did.
func (s *session) fail(j *Job, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failLocked(j, err)
}

func (s *session) failLocked(j *Job, err error) bool {
	if id := j.key(); s.pending[id] == j {
		delete(s.pending, id)
	}
	return j.finish(nil, err)
}

func (s *session) completeLocked(j *Job, data []json.RawMessage) {
	if id := j.key(); s.pending[id] == j {
		delete(s.pending, id)
	}
	j.finish(data, nil)
}

// key is the job's key in s.pending: its event id, or a local key for v0
// jobs (whose event id arrives late and which have their own stream).
func (j *Job) key() string {
	if j.v0key != "" {
		return j.v0key
	}
	return j.id
}

// dropState removes outputs of skip_api components (gr.State, layout
// updates), as the Python client does, when the data has one value per
// output.
func (s *session) dropState(d *Dependency, data []json.RawMessage) []json.RawMessage {
	cfg := s.app.cfg
	if len(data) != len(d.Outputs) {
		return data
	}
	drop := false
	for _, id := range d.Outputs {
		if cfg.IsState(id) {
			drop = true
			break
		}
	}
	if !drop {
		return data
	}
	out := make([]json.RawMessage, 0, len(data))
	for i, id := range d.Outputs {
		if !cfg.IsState(id) {
			out = append(out, data[i])
		}
	}
	return out
}

// ensureStreamLocked starts the stream reader when calls are pending and
// none runs. Callers hold s.mu.
func (s *session) ensureStreamLocked() {
	if s.streamOn || len(s.pending) == 0 {
		return
	}
	s.streamOn = s.goLocked(s.runStream)
}

// runStream keeps GET queue/data open while calls are pending: it reopens
// the stream when the server ends it (close_stream, or EOF on sse_v1/v2)
// with calls still pending, and fails them all when the transport breaks.
func (s *session) runStream() {
	empty := 0
	for {
		s.mu.Lock()
		pre := len(s.pending) == 0 // opened ahead of a join (see submitQueued)
		s.mu.Unlock()
		n, err := s.readStream(pre)
		s.mu.Lock()
		if s.closed || len(s.pending) == 0 {
			s.streamOn = false
			s.mu.Unlock()
			return
		}
		if err == nil && n == 0 {
			empty++
			if empty > 5 {
				err = errors.New("queue/data stream keeps ending without messages")
			}
		} else if n > 0 {
			empty = 0
		}
		if err != nil {
			// The server drops a session's queue when its stream breaks.
			s.knownQueue = false
			for _, j := range s.pending {
				s.failLocked(j, &ConnectionLostError{EventID: j.id, Accepted: true, Err: err})
			}
			s.streamOn = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if empty > 0 {
			t := time.NewTimer(time.Duration(empty) * 50 * time.Millisecond)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
			}
		}
	}
}

// readStream reads one queue/data response. It returns the number of
// messages read and nil at a clean end (close_stream or EOF), or the error
// that broke it.
//
// pre marks a stream opened ahead of a join: a session_not_found on it only
// means the server had forgotten the session, so it ends the stream (to be
// reopened once the join has recreated the queue) instead of failing calls.
func (s *session) readStream(pre bool) (int, error) {
	a := s.app
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	req, err := a.newRequest(ctx, http.MethodGet, a.api("queue/data?session_hash="+url.QueryEscape(s.hash)), nil)
	if err != nil {
		return 0, err
	}
	req.Header["Accept"] = sseAcc
	resp, err := a.do(req, true)
	if err != nil {
		if s.ctx.Err() != nil {
			return 0, nil
		}
		return 0, fmt.Errorf("queue/data: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, &ProtocolError{Op: "queue/data", StatusCode: resp.StatusCode, Body: excerpt(b)}
	}
	wd := s.watchdog(cancel)
	defer wd.stop()
	r := sse.NewReader(resp.Body)
	defer r.Release()
	n := 0
	for {
		ev, err := r.Next()
		wd.touch()
		if err != nil {
			if err == io.EOF {
				return n, nil
			}
			if s.ctx.Err() != nil {
				return n, nil
			}
			if wd.fired.Load() {
				// We hung up: Gradio then deletes the session's message
				// queue, so the next stream must wait for a join.
				s.mu.Lock()
				s.knownQueue = false
				s.mu.Unlock()
				if wd.idleExit.Load() {
					return n, nil
				}
				return n, fmt.Errorf("queue/data: no data for %s", a.set.idleTimeout)
			}
			return n, fmt.Errorf("queue/data: %w", err)
		}
		if len(ev.Data) == 0 {
			continue
		}
		m, err := decodeMessage(ev.Data)
		if err != nil {
			return n, &ProtocolError{Op: "queue/data", Body: excerpt(ev.Data), Err: err}
		}
		n++
		if s.dispatch(m, pre) {
			return n, nil
		}
	}
}

// dispatch routes one message; it reports whether the stream ends.
func (s *session) dispatch(m *message, pre bool) bool {
	switch m.Msg {
	case "close_stream":
		return true
	case "heartbeat":
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.EventID == nil || *m.EventID == "" {
		if m.Msg == "unexpected_error" && m.SessionNotFound {
			s.knownQueue = false
			if pre {
				// This server forgets sessions between calls: stop opening
				// streams ahead of joins for the whole app.
				s.app.noPreopen.Store(true)
				return true
			}
		}
		if m.Msg == "unexpected_error" {
			err := unexpectedErr(m)
			for _, j := range s.pending {
				s.failLocked(j, &ConnectionLostError{EventID: j.id, Accepted: true, Err: err})
			}
		}
		return false
	}
	id := *m.EventID
	if j := s.pending[id]; j != nil {
		if m.Msg == "unexpected_error" {
			s.failLocked(j, &ConnectionLostError{EventID: id, Accepted: true, Err: unexpectedErr(m)})
			return false
		}
		j.handle(m)
		return false
	}
	if s.joining > 0 && s.nEarly < maxEarly {
		if s.early == nil {
			s.early = map[string][]*message{}
		}
		s.early[id] = append(s.early[id], m)
		s.nEarly++
	}
	return false
}

func unexpectedErr(m *message) error {
	msg := m.Message
	if msg == "" {
		msg = "unexpected error"
	}
	if m.SessionNotFound {
		msg += " (session not found)"
	}
	return &ProtocolError{Op: "queue/data", Err: errors.New(msg)}
}

// watchdog cancels a stream that has been silent too long: the idle
// timeout while calls are pending, streamLinger when none are. It is a
// timer re-armed from its own callback, not a goroutine: a stream costs no
// parked stack for it, and touch is one atomic store per message.
type watchdog struct {
	s        *session
	cancel   context.CancelFunc
	idle     time.Duration // the idle timeout (0 = none while calls are pending)
	check    time.Duration // longest sleep between looks at the state
	last     atomic.Int64  // unix nanos of the last activity
	fired    atomic.Bool
	idleExit atomic.Bool // fired because nothing was pending

	mu      sync.Mutex // guards t and stopped: tick re-arms, stop disarms
	t       *time.Timer
	stopped bool
}

func (s *session) watchdog(cancel context.CancelFunc) *watchdog {
	w := &watchdog{s: s, cancel: cancel, idle: s.app.set.idleTimeout, check: streamLinger}
	if w.idle > 0 && w.idle < w.check {
		w.check = w.idle
	}
	w.touch()
	w.mu.Lock() // tick may run before t is stored
	w.t = time.AfterFunc(w.check, w.tick)
	w.mu.Unlock()
	return w
}

// tick runs when the timer expires: it cancels the stream when the gap
// since the last activity reaches the limit that applies now, or re-arms
// the timer for the rest of the gap (at most check, so that a change
// between pending and idle is noticed in time).
func (w *watchdog) tick() {
	s := w.s
	s.mu.Lock()
	none := len(s.pending) == 0 && s.joining == 0
	s.mu.Unlock()
	limit := w.idle
	if none {
		limit = streamLinger
	}
	silent := time.Duration(time.Now().UnixNano() - w.last.Load())
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if limit > 0 && silent >= limit {
		w.stopped = true
		w.idleExit.Store(none)
		w.fired.Store(true)
		w.cancel()
		return
	}
	next := w.check
	if limit > 0 && limit-silent < next {
		next = limit - silent
	}
	w.t.Reset(next)
}

func (w *watchdog) touch() { w.last.Store(time.Now().UnixNano()) }

// stop disarms the timer; once it returns, the watchdog neither fires nor
// re-arms.
func (w *watchdog) stop() {
	w.mu.Lock()
	w.stopped = true
	w.t.Stop()
	w.mu.Unlock()
}

// startHeartbeatLocked starts the /heartbeat/{session} stream once, when
// the app asks for it (config.connect_heartbeat, as the JS client) or
// WithHeartbeat(true) forces it. It is opened lazily on the first call and
// reopened whenever it ends, until Close. Callers hold s.mu.
func (s *session) startHeartbeatLocked() {
	if s.hbOn {
		return
	}
	set, cfg := s.app.set, s.app.cfg
	want := set.heartbeat == 1 || (set.heartbeat == 0 && cfg.ConnectHeartbeat)
	if !want || cfg.Protocol != ProtocolSSEv3 {
		return
	}
	s.hbOn = s.goLocked(s.heartbeatLoop)
}

func (s *session) heartbeatLoop() {
	a := s.app
	backoff := time.Second
	for s.ctx.Err() == nil {
		start := time.Now()
		s.readHeartbeat()
		if s.ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return
		}
		if backoff < 30*time.Second {
			backoff *= 2
		}
		a.log.Debug("gradio: reopening heartbeat", "session", s.hash)
	}
}

func (s *session) readHeartbeat() {
	a := s.app
	req, err := a.newRequest(s.ctx, http.MethodGet, a.api("heartbeat/"+url.PathEscape(s.hash)), nil)
	if err != nil {
		return
	}
	req.Header["Accept"] = sseAcc
	resp, err := a.do(req, true)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
}

// submitV0 runs a call on an sse (v0, Gradio 4.0-4.8) app: one GET
// queue/join stream per call; the inputs are POSTed to queue/data when the
// server asks (send_data).
func (s *session) submitV0(ctx context.Context, dep *Dependency, endpoint string, data []any, oauth *string, quiet bool) (*Job, error) {
	a := s.app
	jctx, jcancel := context.WithCancel(s.ctx)
	q := url.Values{"fn_index": {strconv.Itoa(dep.FnIndex)}, "session_hash": {s.hash}}
	req, err := a.newRequest(jctx, http.MethodGet, a.api("queue/join?"+q.Encode()), nil)
	if err != nil {
		jcancel()
		return nil, err
	}
	req.Header["Accept"] = sseAcc
	req.Header["X-Gradio-User"] = apiUser
	resp, err := a.do(req, true)
	if err != nil {
		jcancel()
		return nil, &ConnectionLostError{Err: fmt.Errorf("queue/join: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := readBody(resp)
		jcancel()
		if resp.StatusCode == http.StatusServiceUnavailable {
			return nil, joinUnavailable("queue/join", b)
		}
		return nil, &ProtocolError{Op: "queue/join", StatusCode: resp.StatusCode, Body: excerpt(b)}
	}
	r := sse.NewReader(resp.Body)
	first, err := readMessage(r)
	if err != nil {
		r.Release()
		resp.Body.Close()
		jcancel()
		return nil, &ConnectionLostError{Err: fmt.Errorf("queue/join: %w", err)}
	}
	if first.Msg == "queue_full" {
		resp.Body.Close()
		jcancel()
		return nil, fmt.Errorf("%w: this application is currently busy", ErrQueueFull)
	}
	j := newJob(s, ctx, dep, endpoint)
	j.quiet = quiet
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		resp.Body.Close()
		jcancel()
		return nil, ErrClosed
	}
	s.v0seq++
	j.v0key = "v0:" + strconv.Itoa(s.v0seq)
	// A completed v0 stream is left for the server to end (runV0 drains
	// it, keeping the connection reusable); anything else cuts it, which
	// is also how v0 cancels.
	j.onFinish = func(err error) {
		if err != nil {
			jcancel()
		}
	}
	s.pending[j.v0key] = j
	s.mu.Unlock()
	pending := []*message{first}
	s.mu.Lock()
	ok := s.goLocked(func() {
		defer r.Release()
		defer resp.Body.Close()
		defer jcancel()
		s.runV0(jctx, jcancel, j, r, pending, data, oauth)
	})
	s.mu.Unlock()
	if !ok {
		resp.Body.Close()
		jcancel()
		return nil, ErrClosed
	}
	j.watch(ctx)
	return j, nil
}

func readMessage(r *sse.Reader) (*message, error) {
	for {
		ev, err := r.Next()
		if err != nil {
			if err == io.EOF {
				return nil, errStreamEnded
			}
			return nil, err
		}
		if len(ev.Data) == 0 {
			continue
		}
		return decodeMessage(ev.Data)
	}
}

// drain reads what is left of a finished v0 stream (the server ends it
// right after process_completed); after 2 s cancel cuts it.
func drain(r *sse.Reader, cancel context.CancelFunc) {
	t := time.AfterFunc(2*time.Second, cancel)
	defer t.Stop()
	for i := 0; i < 16; i++ {
		if _, err := r.Next(); err != nil {
			return
		}
	}
}

func (s *session) runV0(ctx context.Context, cancel context.CancelFunc, j *Job, r *sse.Reader, first []*message, data []any, oauth *string) {
	handle := func(m *message) {
		switch m.Msg {
		case "send_data":
			id := ""
			if m.EventID != nil {
				id = *m.EventID
			}
			j.mu.Lock()
			j.id = id
			j.mu.Unlock()
			body, _ := json.Marshal(joinBody{Data: data, FnIndex: j.dep.FnIndex, SessionHash: s.hash, EventID: &id, OAuthToken: oauth})
			if err := s.app.postJSON(ctx, "queue/data", body); err != nil {
				s.fail(j, &ConnectionLostError{EventID: id, Accepted: true, Err: err})
			}
			return
		case "heartbeat":
			return
		case "queue_full":
			s.fail(j, fmt.Errorf("%w: this application is currently busy", ErrQueueFull))
			return
		}
		s.mu.Lock()
		j.handle(m)
		s.mu.Unlock()
	}
	for _, m := range first {
		handle(m)
	}
	for {
		select {
		case <-j.done:
			if j.err == nil {
				drain(r, cancel)
			}
			return
		default:
		}
		m, err := readMessage(r)
		if err != nil {
			if ctx.Err() == nil {
				s.fail(j, &ConnectionLostError{EventID: j.ID(), Accepted: true, Err: fmt.Errorf("queue/join stream: %w", err)})
			}
			return
		}
		handle(m)
	}
}
