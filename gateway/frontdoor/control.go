package frontdoor

// Heartbeat, cancel and reset.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// handleHeartbeat is GET heartbeat/{session_hash}: the gateway's own ALIVE
// stream. It keeps the caller's session (open stream: it does not expire).
// JS clients open it at connect, before any join.
func (f *FrontDoor) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	front := r.PathValue("session_hash")
	if !validHash(front) {
		detail(w, http.StatusNotFound, "Not Found")
		return
	}
	s, err := f.sessionFor(r.Context(), front, f.owner(r), f.clientID(r), true)
	if err != nil {
		sessionRefused(w, err)
		return
	}
	if s == nil {
		detail(w, http.StatusForbidden, "this session_hash belongs to other credentials")
		return
	}
	defer s.stream(false)()
	rc := startSSE(w)
	t := time.NewTicker(f.conf().HeartbeatInterval)
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

// handleCancel is POST cancel: forwarded to the replica running the call
// (event_id) with the session's backend session hash there.
func (f *FrontDoor) handleCancel(w http.ResponseWriter, r *http.Request) {
	m, ok := f.readBody(w, r)
	if !ok {
		return
	}
	front := str(m["session_hash"])
	var s *callerSession
	if validHash(front) {
		s = f.session(r.Context(), front, f.owner(r), false)
	}
	if s == nil {
		relayed(http.StatusOK, "application/json", []byte(`{"success":true}`)).writeTo(w)
		return
	}
	// A call in the gateway's queue: its wait ends (no replica has it).
	// Then the bridge, whatever that said: a bridged call that waited
	// may have its slot already, its join on the way under the gateway's
	// id (bridgeSubmit), and the bridge ends it. In this order, a join
	// that had not been registered with the bridge yet finds its wait
	// ended and is never sent.
	waited := s.cancelQueuedCall(str(m["event_id"]))
	// The call's own replica and backend session: a spread call may run
	// elsewhere than the session's replica; the replica knows a call
	// that waited in the gateway's queue by its own event id.
	rid := s.replicaID(str(m["event_id"]))
	if br := s.bridgeOf(false); br != nil && br.cancelJob(rid) {
		// A bridged call: the bridge ends it for the caller as Gradio 5's
		// cancel does, and stops it at the replica in its protocol's way.
		s.forgetQueued(str(m["event_id"]))
		relayed(http.StatusOK, "application/json", []byte(`{"success":true}`)).writeTo(w)
		return
	}
	if waited || s.binding().Replica == "" {
		relayed(http.StatusOK, "application/json", []byte(`{"success":true}`)).writeTo(w)
		return
	}
	m["event_id"], _ = json.Marshal(rid)
	replica, backend := s.laneOf(rid)
	app, err := f.appFor(r.Context(), replica)
	if err != nil {
		detail(w, http.StatusBadGateway, err.Error())
		return
	}
	if needsBridge(app.Config()) {
		// An older replica has no cancel of Gradio 5's (the call ended
		// already, or was never known): Gradio answers success.
		relayed(http.StatusOK, "application/json", []byte(`{"success":true}`)).writeTo(w)
		return
	}
	m["session_hash"], _ = json.Marshal(backend)
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
	relayed(resp.StatusCode, resp.Header.Get("Content-Type"), rb).writeTo(w)
}

// handleReset is POST reset: a no-op in Gradio 6 and only cleanup in 4.x,
// answered by the gateway.
func (f *FrontDoor) handleReset(w http.ResponseWriter, r *http.Request) {
	if _, ok := f.readBody(w, r); !ok {
		return
	}
	relayed(http.StatusOK, "application/json", []byte(`{"success":true}`)).writeTo(w)
}

// cancelAtReplica asks b's replica to cancel call eventID of the backend
// session (Gradio's POST cancel), best effort: the slot is already free,
// and a replica that does not answer loses nothing but the call's work.
// dropAtReplica opens the replica's stream of backend session b and drops
// it at once: Gradio then removes the session's queued calls and ends its
// running ones (clean_events, on every release that queues: PROTOCOL.md
// 4.8). For a session nobody reads. The replica notices the drop on its
// own time: dropAtReplica returns once a new stream of the session is
// answered "not found" (the session's queue is gone), or after a few
// tries, so that a cancel sent next cannot complete the queued call
// first (a session whose last call completed closes its stream cleanly,
// dropping nothing).
func (f *FrontDoor) dropAtReplica(b binding) {
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	app, err := f.appFor(ctx, b.Replica)
	if err != nil {
		return
	}
	if majorAtLeast(app.Config().Version, 6) {
		// Gradio 6 keeps a session's queue when its stream drops, and its
		// cancel takes a queued call out of the queue (measured on
		// 6.25.0): the cancel that follows is enough.
		return
	}
	u := app.URL("queue/data") + "?session_hash=" + url.QueryEscape(b.Backend)
	for try := range 4 {
		tctx, tcancel := context.WithTimeout(ctx, time.Second) // its first message (queued calls have one)
		req, err := app.NewRequest(tctx, http.MethodGet, u, nil)
		if err != nil {
			tcancel()
			return
		}
		resp, err := app.Do(req, true)
		if err != nil {
			tcancel()
			f.log.Debug("front door: dropping a session's stream at the replica failed", slog.String("replica", b.Replica), slog.Any("error", err))
			return
		}
		var first [512]byte
		n, _ := io.ReadAtLeast(resp.Body, first[:], 1)
		resp.Body.Close() // the drop: the connection goes with it
		tcancel()
		if resp.StatusCode == http.StatusNotFound || bytes.Contains(first[:n], []byte("session_not_found")) {
			return // dropped
		}
		if try > 0 {
			select { // the replica has not noticed the drop yet
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

func (f *FrontDoor) cancelAtReplica(b binding, eventID, fnIndex string) {
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	app, err := f.appFor(ctx, b.Replica)
	if err != nil {
		return
	}
	body := map[string]any{"session_hash": b.Backend, "event_id": eventID}
	if n, err := strconv.Atoi(fnIndex); err == nil {
		body["fn_index"] = n
	}
	out, _ := json.Marshal(body)
	req, err := app.NewRequest(ctx, http.MethodPost, app.URL("cancel"), bytes.NewReader(out))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := app.Do(req, true)
	if err != nil {
		f.log.Debug("front door: cancel at the replica failed", slog.String("replica", b.Replica), slog.Any("error", err))
		return
	}
	_, _ = readSmall(resp)
}
