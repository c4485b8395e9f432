package gradio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// Gradio's REST shape as a transport: POST {prefix}/call/{api_name} with
// {"data": [...]} answers {"event_id"}, and GET
// {prefix}/call/{api_name}/{event_id} streams "event: generating" (full
// values, never diffs), then "event: complete" or "event: error" (Gradio
// 4.20+). The client uses it when the app's queue routes are not reachable
// (queue/join answers 404 or 405, as behind a proxy that only forwards
// /call), or always with WithCallTransport.
//
// What the real servers show (4.20.1, 4.44.1, 5.49.1, 6.25.0 measured):
// before Gradio 6, /call ignores the session (a session_hash in the POST
// body even breaks the GET: "404: Session not found."), so gr.State does not
// survive between calls there, and an error's message is not sent (data
// null); Gradio 6 keeps state per session_hash and sends the error dict.
// There are no queue positions, and ending a call cuts its stream (no
// /cancel: the app finishes the call).

// WithCallTransport makes every call use Gradio's REST shape (/call)
// instead of the queue protocol. See the limits above.
func WithCallTransport() Option { return func(s *settings) { s.callREST = true } }

// callTransport reports whether calls go through /call.
func (a *app) callTransport() bool { return a.set.callREST || a.useCall.Load() }

// callCapable reports whether the app has the /call routes (Gradio 4.20+:
// sse_v2 and later) and the endpoint an api_name to name them by.
func callCapable(cfg *Config, dep *Dependency) bool {
	switch cfg.Protocol {
	case protocolSSEv2, protocolSSEv21, protocolSSEv3:
		return dep.APIName != ""
	}
	return false
}

// queueUnreachable reports whether a join failed because the queue route
// itself is missing (not a refused call).
func queueUnreachable(err error) bool {
	var pe *ProtocolError
	return errors.As(err, &pe) && (pe.StatusCode == http.StatusNotFound || pe.StatusCode == http.StatusMethodNotAllowed)
}

// submitCall runs a call through /call.
func (s *appSession) submitCall(ctx context.Context, dep *Dependency, endpoint string, data []any, jo jobOpts) (*Job, error) {
	a := s.app
	if !callCapable(a.cfg, dep) {
		return nil, &ArgumentError{Endpoint: endpoint, Msg: fmt.Sprintf("the /call transport needs Gradio 4.20+ and an endpoint with an api_name (Gradio %s, protocol %q)", a.cfg.Version, a.cfg.Protocol)}
	}
	body := map[string]any{"data": data}
	if versionAtLeast(a.cfg.Version, "6.0") {
		body["session_hash"] = s.hash // only Gradio 6 keys /call state on it
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, &ArgumentError{Endpoint: endpoint, Msg: "arguments are not JSON-encodable", Err: err}
	}
	route := "call/" + url.PathEscape(dep.APIName)
	resp, sent, err := a.post(context.WithoutCancel(ctx), route, b, false, true)
	if err != nil {
		return nil, &ConnectionLostError{MaybeAccepted: sent, Err: fmt.Errorf("%s: %w", route, err)}
	}
	rb, err := a.readBody(resp)
	if err != nil {
		return nil, &ConnectionLostError{MaybeAccepted: true, Err: fmt.Errorf("%s: %w", route, err)}
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusServiceUnavailable:
		return nil, joinUnavailable(route, rb)
	case http.StatusUnprocessableEntity:
		return nil, &ArgumentError{Endpoint: endpoint, Msg: "the app rejected the arguments: " + detail(rb)}
	default:
		return nil, &ProtocolError{Op: route, StatusCode: resp.StatusCode, Body: excerpt(rb)}
	}
	var v struct {
		EventID string `json:"event_id"`
	}
	if json.Unmarshal(rb, &v) != nil || v.EventID == "" {
		return nil, &ProtocolError{Op: route, Body: excerpt(rb), Err: errors.New("no event_id")}
	}
	jctx, jcancel := context.WithCancel(s.ctx)
	j := newJob(s, ctx, dep, endpoint, jo)
	j.id = v.EventID
	j.onFinish = func(error) { jcancel() }
	return s.startLocalJob(ctx, j, jcancel, func() { s.readCall(jctx, j, route+"/"+url.PathEscape(v.EventID)) })
}

// readCall follows the GET stream of one /call event.
func (s *appSession) readCall(ctx context.Context, j *Job, route string) {
	a := s.app
	req, err := a.newRequest(ctx, http.MethodGet, a.api(route), nil)
	if err != nil {
		s.fail(j, err)
		return
	}
	req.Header["Accept"] = sseAcc
	resp, err := a.do(req, true)
	if err != nil {
		if ctx.Err() == nil {
			s.fail(j, &ConnectionLostError{EventID: j.id, Accepted: true, Err: fmt.Errorf("%s: %w", route, err)})
		}
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		s.fail(j, &ProtocolError{Op: route, StatusCode: resp.StatusCode, Body: excerpt(b)})
		return
	}
	r := s.eventReader(resp.Body)
	defer r.Release()
	started := false
	for {
		ev, err := r.Next()
		if err != nil {
			if ctx.Err() == nil {
				s.fail(j, &ConnectionLostError{EventID: j.id, Accepted: true, Err: fmt.Errorf("%s: %w", route, err)})
			}
			return
		}
		switch ev.Type {
		case "heartbeat":
			continue
		case "generating", "complete":
			var h *sse.Hold
			if ev.Type == "complete" {
				if h, err = holdEvent(r, ev.Data); err != nil {
					s.fail(j, &ConnectionLostError{EventID: j.id, Accepted: true, Err: fmt.Errorf("%s: %w", route, err)})
					return
				}
			}
			var data []json.RawMessage
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				h.Release()
				s.fail(j, &ProtocolError{Op: route, Body: excerpt(ev.Data), Err: err})
				return
			}
			data = s.dropState(j.dep, data)
			if ev.Type == "complete" {
				s.mu.Lock()
				j.keep(h)
				s.completeLocked(j, data)
				s.mu.Unlock()
				return
			}
			if !started {
				started = true
				j.emit(Event{Kind: EventStarted})
			}
			j.emit(Event{Kind: EventOutput, Data: data})
		case "error":
			s.fail(j, callError(ev.Data))
			return
		}
	}
}

// callError turns the data of an "event: error" into an error: Gradio 6
// sends the error dict, earlier releases null (the app raised, message
// withheld) or a string ("404: Not Found" for an unknown event).
func callError(data []byte) error {
	var dict map[string]json.RawMessage
	if json.Unmarshal(data, &dict) == nil && dict != nil {
		if o, err := parseOutput(data); err == nil && o.isError() {
			return o.appError(nil)
		}
	}
	var s *string
	if json.Unmarshal(data, &s) == nil && s != nil {
		return &ProtocolError{Op: "call", Err: errors.New(*s)}
	}
	return &AppError{Hidden: true, Message: "the app raised an error; Gradio's /call does not send its message before 6.0"}
}
