package gateway

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// pendingCalls keeps the calls started by POST /gradio_api/call/{api} for
// their GET, like Gradio's session message buffer: bounded in number, and
// each kept for a TTL after it finished.
type pendingCalls struct {
	max int
	ttl time.Duration

	mu    sync.Mutex // guards calls; nothing slow runs under it
	calls map[string]*pendingCall
}

// record is one Gradio REST event: generating, complete or error.
type record struct {
	name string
	data json.RawMessage
}

type pendingCall struct {
	apiName string

	mu       sync.Mutex // guards the fields below
	records  []record
	done     bool
	finished time.Time
	changed  chan struct{} // closed and replaced on every new record
}

func newPendingCalls(max int, ttl time.Duration) *pendingCalls {
	return &pendingCalls{max: max, ttl: ttl, calls: map[string]*pendingCall{}}
}

// add registers a call unless the map is full after expiring old calls.
func (p *pendingCalls) add(id string, c *pendingCall, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.calls) >= p.max {
		for k, v := range p.calls {
			if v.expired(now, p.ttl) {
				delete(p.calls, k)
			}
		}
	}
	if len(p.calls) >= p.max {
		return false
	}
	p.calls[id] = c
	return true
}

func (p *pendingCalls) get(id string, now time.Time) *pendingCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls[id]
	if c != nil && c.expired(now, p.ttl) {
		delete(p.calls, id)
		return nil
	}
	return c
}

func (p *pendingCalls) remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.calls, id)
}

func (c *pendingCall) expired(now time.Time, ttl time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done && now.Sub(c.finished) > ttl
}

func (c *pendingCall) push(r record, final bool, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, r)
	if final {
		c.done = true
		c.finished = now
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// from returns the records from index i, whether the call is done, and a
// channel closed on the next change.
func (c *pendingCall) from(i int) ([]record, bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.records[i:], c.done, c.changed
}

// handleCallPost starts a call whose result is read by a later GET. The
// call outlives the POST: it runs under the gateway's job context, so a
// drain lets it finish.
func (g *Gateway) handleCallPost(w http.ResponseWriter, r *http.Request) {
	if g.rejectDraining(w) {
		return
	}
	user, args, endpoint, aerr := g.readCall(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	// The call outlives the POST, so its deadline runs on the gateway's
	// job context, not the request's.
	release, ok := g.beginClientCall(w, r)
	if !ok {
		return
	}
	ctx, cancel0, aerr := deadlineContext(g.jobsCtx, r)
	if aerr != nil {
		release()
		writeError(w, aerr)
		return
	}
	ctx = pool.WithRoute(ctx, RouteCall)      // the door, on the pool's events of the call
	cancel := func() { cancel0(); release() } // the call counts until it ends
	id := newID()
	pc := &pendingCall{apiName: endpoint, changed: make(chan struct{})}
	if !g.pending.add(id, pc, g.now()) {
		cancel()
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: "too_many_pending_calls",
			Message: "too many /gradio_api/call results are waiting to be read (max_pending_calls)", RetryAfter: 5})
		return
	}
	done := g.track()
	start := g.now()
	call, err := g.backend.Submit(ctx, user, endpoint, args)
	if err != nil {
		cancel()
		done()
		g.pending.remove(id)
		g.failCall(w, r, RouteCall, endpoint, g.now().Sub(start), err)
		return
	}
	wait := call.Waited()
	addLog(r, slog.String("endpoint", endpoint), slog.String("replica", call.Replica()), slog.String("event_id", id))
	go func() {
		defer done()
		defer cancel()
		for ev := range call.Events() {
			if ev.Kind == gradio.EventOutput {
				pc.push(record{"generating", mustJSON(nonNil(ev.Data))}, false, g.now())
			}
		}
		out, err := call.Wait(ctx)
		if err != nil {
			e := callError(ctx, err)
			g.metrics.ObserveCall(CallRecord{Route: RouteCall, Replica: call.Replica(), Endpoint: endpoint, Wait: wait, Total: g.now().Sub(start), Code: e.Code})
			g.log.LogAttrs(ctx, slog.LevelWarn, "call failed", append([]slog.Attr{slog.String("event_id", id), slog.String("endpoint", endpoint),
				slog.String("replica", call.Replica())}, g.errorLogAttrs(e)...)...)
			payload := map[string]any{"error": e.Message, "code": e.Code}
			if e.Title != "" {
				payload["title"] = e.Title
			}
			pc.push(record{"error", mustJSON(payload)}, true, g.now())
			return
		}
		g.metrics.ObserveCall(CallRecord{Route: RouteCall, Replica: call.Replica(), Endpoint: endpoint, Wait: wait, Total: g.now().Sub(start)})
		pc.push(record{"complete", mustJSON(nonNil(out))}, true, g.now())
	}()
	writeJSON(w, http.StatusOK, map[string]string{"event_id": id})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// handleCallGet streams the records of a call started by handleCallPost,
// from the first; it ends after complete or error. Like Gradio, an unknown
// or expired event id is an `event: error` record with "404: Not Found".
func (g *Gateway) handleCallGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("event_id")
	pc := g.pending.get(id, g.now())
	if pc == nil || pc.apiName != r.PathValue("api_name") {
		s := startSSE(w)
		_ = sendEvent(s, "error", "404: Not Found")
		return
	}
	s := startSSE(w)
	tick := time.NewTicker(g.cfg.KeepAliveInterval)
	defer tick.Stop()
	next := 0
	for {
		recs, done, changed := pc.from(next)
		for _, rec := range recs {
			if s.Event(rec.name, rec.data) != nil {
				return
			}
			next++
		}
		if done {
			return
		}
		select {
		case <-changed:
		case <-tick.C:
			if s.Event("heartbeat", []byte("null")) != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
