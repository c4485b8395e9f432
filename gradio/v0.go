package gradio

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// submitV0 runs a call on an sse (v0, Gradio 4.0-4.8) app: one GET
// queue/join stream per call; the inputs are POSTed to queue/data when the
// server asks (send_data).
func (s *appSession) submitV0(ctx context.Context, dep *Dependency, endpoint string, data []any, oauth *string, jo jobOpts) (*Job, error) {
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
		b, _ := a.readBody(resp)
		jcancel()
		if resp.StatusCode == http.StatusServiceUnavailable {
			return nil, joinUnavailable("queue/join", b)
		}
		return nil, &ProtocolError{Op: "queue/join", StatusCode: resp.StatusCode, Body: excerpt(b)}
	}
	r := s.eventReader(resp.Body)
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
	j := newJob(s, ctx, dep, endpoint, jo)
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
		return decodeHeld(r, ev.Data)
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

func (s *appSession) runV0(ctx context.Context, cancel context.CancelFunc, j *Job, r *sse.Reader, first []*message, data []any, oauth *string) {
	handle := func(m *message) {
		defer func() {
			s.mu.Lock()
			m.releaseHold()
			s.mu.Unlock()
		}()
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
