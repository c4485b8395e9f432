package gradio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"
)

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

func (s *appSession) submitQueued(ctx context.Context, dep *Dependency, endpoint string, data []any, oauth *string, jo jobOpts) (*Job, error) {
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
	if s.knownQueue && s.app.cfg.Protocol == protocolSSEv3 && !s.streamOn && !s.app.noPreopen.Load() {
		// Open the stream while the join is in flight: it saves a round
		// trip per call. Messages that beat the join's answer are buffered
		// (s.early); the server keeps a known session's queue waiting.
		s.streamOn = s.goLocked(s.runStream)
	}
	if ctx.Done() == nil {
		s.mu.Unlock()
		return s.joinAndRegister(ctx, dep, endpoint, body, jo)
	}
	// The join runs detached from ctx (a call the app accepted must be
	// known, to be cancelled), but the caller does not wait past its ctx
	// for it: a stalled app would hold it for the whole header timeout.
	type joined struct {
		j   *Job
		err error
	}
	ch := make(chan joined, 1)
	s.goLocked(func() {
		j, err := s.joinAndRegister(ctx, dep, endpoint, body, jo)
		ch <- joined{j, err}
	})
	s.mu.Unlock()
	select {
	case r := <-ch:
		return settled(ctx, r.j, r.err)
	case <-ctx.Done():
	}
	select {
	case r := <-ch: // both ready: the join's own answer is the more precise
		return settled(ctx, r.j, r.err)
	default:
	}
	// joinAndRegister sees ctx ended once the join returns: it cancels a
	// job the app accepted, and the session's Close waits for it.
	return nil, fmt.Errorf("%w: %w", ErrMaybeAccepted, ctx.Err())
}

// settled is a join's result for a caller whose ctx may have ended: a join
// sent in full and cut by that end (the join's own deadline is the
// caller's) is ErrMaybeAccepted, as when the caller stops waiting first;
// which of the two the caller saw first was a race.
func settled(ctx context.Context, j *Job, err error) (*Job, error) {
	var lost *ConnectionLostError
	if err != nil && ctx.Err() != nil && errors.As(err, &lost) && lost.MaybeAccepted {
		return nil, fmt.Errorf("%w: %w", ErrMaybeAccepted, ctx.Err())
	}
	return j, err
}

// joinAndRegister sends the join and registers the job it started; when
// ctx has ended by then, the job is cancelled at the app. The caller has
// counted the join in s.joining.
func (s *appSession) joinAndRegister(ctx context.Context, dep *Dependency, endpoint string, body []byte, jo jobOpts) (*Job, error) {
	// A join right after a hang-up (failDropping) waits out cutGrace, or
	// the app could drop it with the session's cancelled queued events.
	err := s.waitCutGrace(ctx)
	if err == nil {
		err = s.waitCancelling(ctx)
	}
	if err != nil {
		s.mu.Lock()
		s.joining--
		s.mu.Unlock()
		return nil, err
	}
	eventID, err := s.join(ctx, body)
	j := newJob(s, ctx, dep, endpoint, jo)
	j.id = eventID
	s.mu.Lock()
	s.joining--
	if err == nil && s.closed {
		err = ErrClosed
	}
	if err != nil {
		if s.joining == 0 {
			s.dropEarlyLocked()
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
			m.releaseHold()
		}
	}
	if s.joining == 0 {
		s.dropEarlyLocked()
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
//
// A join that the app is slow to answer (its threads busy: Gradio's
// max_threads) may still be accepted: its answer is awaited as long as the
// caller's deadline allows, not cut at the header time-out, so that a call
// the app queued late is not reported as failed while it runs. Without a
// deadline the header time-out bounds the wait (a hung app must not hold
// the caller for ever).
func (s *appSession) join(ctx context.Context, body []byte) (string, error) {
	jctx, headerTimeout := context.WithoutCancel(ctx), true
	if deadline, ok := ctx.Deadline(); ok {
		if d := s.app.set.headerTimeout; d > 0 && time.Until(deadline) > d {
			var cancel context.CancelFunc
			jctx, cancel = context.WithDeadline(jctx, deadline)
			defer cancel()
			headerTimeout = false
		}
	}
	resp, sent, err := s.app.post(jctx, "queue/join", body, true, headerTimeout)
	if err != nil {
		// Whether the request was written in full decides whether a failure
		// proves the app never got the call (a pool may then run it
		// elsewhere) or leaves it possibly queued (it must not run twice).
		return "", &ConnectionLostError{MaybeAccepted: sent, Err: fmt.Errorf("queue/join: %w", err)}
	}
	a := s.app
	rb, err := a.readBody(resp)
	if err != nil {
		// The app answered; with a 200 it has queued the job.
		return "", &ConnectionLostError{MaybeAccepted: true, Err: fmt.Errorf("queue/join: %w", err)}
	}
	// The client resolved the endpoint in its config: a 500 here is the
	// replica's failure, not an unknown fn_index.
	return JoinAnswer(resp.StatusCode, rb, true)
}

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

// cancelDetached sends /cancel in the background, bounded by the cancel
// timeout.
func (s *appSession) cancelDetached(j *Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelDetachedLocked(j)
}

// cancelDetachedLocked starts the cancel as one of the session's goroutines
// (Close waits for it); on a closed session it is sent at once instead.
// Callers hold s.mu.
func (s *appSession) cancelDetachedLocked(j *Job) {
	if !s.goLocked(func() { s.sendCancelBounded(j) }) {
		go s.sendCancelBounded(j)
	}
}

// sendCancelBounded is sendCancel on a context of its own (not the
// session's, which Close ends first), bounded by the cancel timeout.
func (s *appSession) sendCancelBounded(j *Job) {
	ctx, cancel := context.WithTimeout(context.Background(), s.app.set.cancelTimeout)
	defer cancel()
	if err := s.sendCancel(ctx, j); err != nil {
		s.app.log.Debug("gradio: cancel failed", "session", s.hash, "event_id", j.ID(), "err", err)
	}
}

// sendCancel POSTs {prefix}/cancel (Gradio 4.29+; earlier apps have no way
// to cancel a queued job from the API) and, for Gradio 4.x, {prefix}/reset.
func (s *appSession) sendCancel(ctx context.Context, j *Job) error {
	a := s.app
	cfg := a.cfg
	if cfg.Protocol == protocolSSE {
		return nil // v0: closing the job's own stream (done by finish) cancels it
	}
	id := j.ID()
	if id == "" || cfg.Protocol != protocolSSEv3 || !versionAtLeast(cfg.Version, "4.29") {
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
	resp, _, err := a.post(ctx, p, body, false, true)
	if err != nil {
		return fmt.Errorf("gradio: %s: %w", p, err)
	}
	rb, _ := a.readBody(resp)
	if resp.StatusCode != http.StatusOK {
		return &ProtocolError{Op: p, StatusCode: resp.StatusCode, Body: excerpt(rb)}
	}
	return nil
}

// post sends a JSON POST to the app's route p. sent reports whether the
// request was written in full: when it was not, the app cannot have read it.
// A kept-alive connection the server closed while we picked it fails that
// way; net/http retries such a request itself only when not a byte was
// written, and here a part may have been, so it is sent once more on a fresh
// connection (the other idle ones are likely as stale). So is one that
// net/http reports the server closed as idle, even written in full. asAPI
// marks the
// request as the official clients' API calls do; headerTimeout bounds the
// wait for the answer's headers by the client's header time-out.
func (a *app) post(ctx context.Context, p string, body []byte, asAPI, headerTimeout bool) (resp *http.Response, sent bool, err error) {
	for attempt := 0; ; attempt++ {
		req, err := a.newRequest(ctx, http.MethodPost, a.api(p), bytes.NewReader(body))
		if err != nil {
			return nil, false, err
		}
		req.Header["Content-Type"] = jsonCT
		if asAPI {
			req.Header["X-Gradio-User"] = apiUser
		}
		var wrote, reused atomic.Bool
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn:      func(i httptrace.GotConnInfo) { reused.Store(i.Reused) },
			WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
		}))
		resp, err = a.do(req, headerTimeout)
		if err == nil {
			return resp, true, nil
		}
		closedIdle := serverClosedIdle(err)
		if attempt > 0 || !reused.Load() || (wrote.Load() && !closedIdle) {
			return nil, wrote.Load() && !closedIdle, err
		}
		if a.own != nil {
			a.own.CloseIdleConnections()
		}
		a.log.Debug("gradio: a POST failed on a reused connection before it was sent; retrying on a new one", "route", p, "err", err)
	}
}

// serverClosedIdle reports net/http's "server closed idle connection": the
// end of the reused connection was read before the request was put on it,
// so the server closed it (uvicorn's keep-alive time-out, a restart) without
// reading the request, even when its bytes were written into the socket.
// net/http retries that itself only for idempotent requests, and has no
// exported error for it, hence the text.
func serverClosedIdle(err error) bool {
	return err != nil && strings.Contains(err.Error(), "http: server closed idle connection")
}
