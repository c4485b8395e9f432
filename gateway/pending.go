package gateway

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// pendingCalls keeps the calls started by POST /gradio_api/call/{api} for
// their GET, like Gradio's session message buffer: bounded in number (per
// client and in total) and in bytes (per call and in total), freed once
// read to their end, and kept unread for a TTL after they finished.
type pendingCalls struct {
	max          int
	maxPerClient int   // <= 0: no limit
	maxResult    int64 // bytes one call buffers unread; <= 0: no limit
	maxBytes     int64 // bytes every call buffers unread; <= 0: no limit
	ttl          time.Duration

	mu        sync.Mutex // guards calls, perClient and bytes; nothing slow runs under it
	calls     map[string]*pendingCall
	perClient map[string]int
	bytes     int64
}

// record is one Gradio REST event: generating, complete or error.
type record struct {
	name string
	data json.RawMessage
}

type pendingCall struct {
	apiName string
	client  string

	mu       sync.Mutex // guards the fields below
	records  []record   // unread records; records[0] is number base
	base     int
	size     int64 // bytes of records
	gone     bool  // removed: its bytes count no more
	done     bool
	finished time.Time
	changed  chan struct{} // closed and replaced on every new record
}

func newPendingCalls(max int, ttl time.Duration) *pendingCalls {
	return &pendingCalls{max: max, ttl: ttl, calls: map[string]*pendingCall{}, perClient: map[string]int{}}
}

// Why add refused a call.
var (
	errPendingFull      = errors.New("max_pending_calls")
	errPendingPerClient = errors.New("max_pending_calls_per_client")
)

// add registers a call unless the map, or the client's share of it, is
// full after expiring old calls.
func (p *pendingCalls) add(id string, c *pendingCall, now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.calls) >= p.max || (p.maxPerClient > 0 && p.perClient[c.client] >= p.maxPerClient) {
		for k, v := range p.calls {
			if v.expired(now, p.ttl) {
				p.removeLocked(k, v)
			}
		}
	}
	if len(p.calls) >= p.max {
		return errPendingFull
	}
	if p.maxPerClient > 0 && p.perClient[c.client] >= p.maxPerClient {
		return errPendingPerClient
	}
	p.calls[id] = c
	p.perClient[c.client]++
	return nil
}

func (p *pendingCalls) get(id string, now time.Time) *pendingCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls[id]
	if c != nil && c.expired(now, p.ttl) {
		p.removeLocked(id, c)
		return nil
	}
	return c
}

func (p *pendingCalls) remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.calls[id]; c != nil {
		p.removeLocked(id, c)
	}
}

// removeLocked forgets call id and gives back its bytes; p.mu is held.
func (p *pendingCalls) removeLocked(id string, c *pendingCall) {
	delete(p.calls, id)
	if p.perClient[c.client]--; p.perClient[c.client] <= 0 {
		delete(p.perClient, c.client)
	}
	c.mu.Lock()
	p.bytes -= c.size
	c.size = 0
	c.records = nil
	c.gone = true
	c.mu.Unlock()
}

// count is the calls kept and the bytes they buffer.
func (p *pendingCalls) count() (int, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls), p.bytes
}

func (c *pendingCall) expired(now time.Time, ttl time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done && now.Sub(c.finished) > ttl
}

// push adds a record unless it would take the call's unread records past
// maxResult bytes, or everyone's past maxBytes (then false: nothing
// added); force adds it anyway (the error record that ends a cut call).
func (p *pendingCalls) push(c *pendingCall, r record, final, force bool, now time.Time) bool {
	n := int64(len(r.data)) + int64(len(r.name))
	p.mu.Lock()
	defer p.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !force && ((p.maxResult > 0 && c.size+n > p.maxResult) || (p.maxBytes > 0 && p.bytes+n > p.maxBytes)) {
		return false
	}
	if c.gone {
		return true // nobody can read it any more
	}
	c.size += n
	p.bytes += n
	c.records = append(c.records, r)
	if final {
		c.done = true
		c.finished = now
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return true
}

// from returns the records from number i, whether the call is done, and
// a channel closed on the next change.
func (c *pendingCall) from(i int) ([]record, bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i = max(i-c.base, 0)
	return c.records[min(i, len(c.records)):], c.done, c.changed
}

// consumed drops the records before number i: they were sent, and a
// generator's output would otherwise pile up for as long as it runs.
func (p *pendingCalls) consumed(c *pendingCall, i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return
	}
	k := min(max(i-c.base, 0), len(c.records))
	var n int64
	for _, r := range c.records[:k] {
		n += int64(len(r.data)) + int64(len(r.name))
	}
	c.records = append([]record(nil), c.records[k:]...)
	c.base += k
	c.size -= n
	p.bytes -= n
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
	ctx = pool.WithRoute(ctx, routeCall)      // the door, on the pool's events of the call
	cancel := func() { cancel0(); release() } // the call counts until it ends
	id := newID()
	pc := &pendingCall{apiName: endpoint, client: g.clientID(r), changed: make(chan struct{})}
	if err := g.pending.add(id, pc, g.now()); err != nil {
		cancel()
		ae := &apiError{Status: http.StatusServiceUnavailable, Code: "too_many_pending_calls",
			Message: "too many /gradio_api/call results are waiting to be read (max_pending_calls)", RetryAfter: 5}
		if errors.Is(err, errPendingPerClient) {
			ae.Status = http.StatusTooManyRequests
			ae.Message = "this client has too many /gradio_api/call results waiting to be read (max_pending_calls_per_client); read them first"
		}
		writeError(w, ae)
		return
	}
	done := g.track()
	start := g.now()
	call, err := g.backend.Submit(ctx, user, pool.CallOptions{}, endpoint, args)
	if err != nil {
		cancel()
		done()
		g.pending.remove(id)
		g.failCall(w, r, routeCall, endpoint, g.now().Sub(start), err)
		return
	}
	wait := call.Waited()
	addLog(r, slog.String("endpoint", endpoint), slog.String("replica", call.Replica()), slog.String("event_id", id))
	go func() {
		defer done()
		defer cancel()
		// Past max_pending_result_bytes unread (or everyone's
		// max_pending_bytes) the call is stopped: its output would grow the
		// gateway's heap for as long as nobody reads it.
		cut := false
		for ev := range call.Events() {
			if ev.Kind == gradio.EventOutput && !cut &&
				!g.pending.push(pc, record{"generating", mustJSON(nonNil(ev.Data))}, false, false, g.now()) {
				cut = true
				cancel0()
			}
		}
		out, err := call.Wait(ctx)
		if !cut && err == nil && !g.pending.push(pc, record{"complete", mustJSON(nonNil(out))}, true, false, g.now()) {
			cut = true
		}
		if cut {
			g.metrics.observeCall(CallRecord{Route: routeCall, Replica: call.Replica(), Endpoint: endpoint, Wait: wait, Total: g.now().Sub(start), Code: codeResultTooLarge})
			g.log.LogAttrs(ctx, slog.LevelWarn, "call stopped: its result is too large to keep", slog.String("event_id", id),
				slog.String("endpoint", endpoint), slog.String("replica", call.Replica()))
			g.pending.push(pc, record{"error", mustJSON(map[string]any{"code": codeResultTooLarge,
				"error": "gradiopool: the call's output waiting to be read exceeds max_pending_result_bytes (or the gateway's max_pending_bytes); it was stopped"})}, true, true, g.now())
			return
		}
		if err != nil {
			e := callError(ctx, err)
			g.metrics.observeCall(CallRecord{Route: routeCall, Replica: call.Replica(), Endpoint: endpoint, Wait: wait, Total: g.now().Sub(start), Code: e.Code})
			g.log.LogAttrs(ctx, slog.LevelWarn, "call failed", append([]slog.Attr{slog.String("event_id", id), slog.String("endpoint", endpoint),
				slog.String("replica", call.Replica())}, g.errorLogAttrs(e)...)...)
			payload := map[string]any{"error": e.Message, "code": e.Code}
			if e.Title != "" {
				payload["title"] = e.Title
			}
			g.pending.push(pc, record{"error", mustJSON(payload)}, true, true, g.now())
			return
		}
		g.metrics.observeCall(CallRecord{Route: routeCall, Replica: call.Replica(), Endpoint: endpoint, Wait: wait, Total: g.now().Sub(start)})
	}()
	writeJSON(w, http.StatusOK, map[string]string{"event_id": id})
}

// codeResultTooLarge ends a /gradio_api/call call whose unread output
// passed max_pending_result_bytes or max_pending_bytes.
const codeResultTooLarge = "result_too_large"

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
			// Read to its end: freed now, not after pending_call_ttl.
			g.pending.remove(id)
			return
		}
		g.pending.consumed(pc, next)
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
