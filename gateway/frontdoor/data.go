package frontdoor

// GET queue/data: relaying a bound session's event stream from its
// replica, and reporting the calls lost with it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/sse"
)

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
	var s *callerSession
	if validHash(front) {
		s = f.session(ctx, front, f.owner(r), false)
	}
	if s == nil || s.binding().Replica == "" {
		rc := startSSE(w)
		_ = rc.Data(sessionNotFound)
		return
	}
	defer s.stream()()
	defer s.reading()()
	b := s.binding()
	// The replica's stream also ends at StopCalls (a drain's time-out);
	// the caller's stream then gets its calls' errors (failPending).
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(f.stopCalls, cancel)()
	f.annotate(r, slog.String("replica", b.Replica))
	if u, err := user(r); err == nil && u != "" {
		f.annotate(r, slog.String("user", f.cfg.HashUser(u)))
	}
	app, err := f.appFor(ctx, b.Replica)
	if err != nil {
		f.failPending(w, startSSE(w), s, b, err)
		return
	}
	var rc *sse.Writer // nil until the caller's stream started
	quiet := 0
	for {
		resp, err := f.openData(rctx, r, app, b)
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
func (f *FrontDoor) relayData(w http.ResponseWriter, rc *sse.Writer, r *http.Request, s *callerSession, app *gradio.Client, b Binding, resp *http.Response) (relayed int, reopen, done bool, cause error) {
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
func (f *FrontDoor) failPending(w http.ResponseWriter, rc *sse.Writer, s *callerSession, b Binding, cause error) {
	ids := s.inFlight()
	stopped := f.stopCalls.Err() != nil
	for _, id := range ids {
		msg := "gradiopool: the connection to the replica was lost while it ran this call; the call is not run again"
		switch {
		case stopped:
			msg = stoppedDetail
		case f.cfg.ShowReplicaErrors:
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
	if len(ids) > 0 && stopped {
		f.log.Warn("front door: calls stopped by the drain time-out", slog.String("replica", b.Replica),
			slog.String("session", shortHash(s.front)), slog.Int("calls", len(ids)))
	} else if len(ids) > 0 {
		f.log.Warn("front door: replica lost calls in flight", slog.String("replica", b.Replica),
			slog.String("session", shortHash(s.front)), slog.Int("calls", len(ids)), slog.Any("error", cause))
	}
	_ = rc.Data([]byte(`{"msg":"close_stream","event_id":null}`))
	f.foreignEnd(s.front, "")
}
