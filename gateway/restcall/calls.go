// Package restcall serves Gradio's REST call API whatever the backend:
// POST /gradio_api/call/{api_name} starts a call and answers its event id,
// GET /gradio_api/call/{api_name}/{event_id} streams its records. The
// results wait here for their GET (pending.go); the host (the gateway)
// reads, admits and runs the calls as it does its other call routes, so
// one body format, one per-client bound and one error shape serve them
// all. It needs no pool and no front door: it is apart from both.
//
// The records (generating, complete or error) are kept for their GET,
// bounded in number (in total and per client) and in bytes (per call and
// in total; past them a call is stopped with [CodeResultTooLarge]), freed
// once read to their end or a TTL after the call ended.
package restcall

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/sse"
)

// CodeResultTooLarge ends a call whose unread output passed
// CallsConfig.MaxResultBytes or MaxBytes.
const CodeResultTooLarge = "result_too_large"

// ErrResultTooLarge is the end StartedCall.End is told of when a call was
// stopped because its unread output passed a bound.
var ErrResultTooLarge = errors.New("gradiopool: the call's output waiting to be read exceeds max_pending_result_bytes (or the gateway's max_pending_bytes); it was stopped")

// CallsConfig configures [Calls]. Its bounds are the gateway's settings
// (max_pending_calls and the others), which hold their defaults.
type CallsConfig struct {
	// MaxPending bounds the calls kept for their GET; a POST past it is
	// refused with 503. It must be positive.
	MaxPending int
	// MaxPendingPerClient bounds the calls of one client (ClientID) kept;
	// a POST past it is refused with 429. <= 0: no limit.
	MaxPendingPerClient int
	// MaxResultBytes bounds the output one call keeps unread, MaxBytes
	// every call's; past either the call is stopped (CodeResultTooLarge).
	// <= 0: no limit.
	MaxResultBytes, MaxBytes int64
	// TTL is how long an unread result is kept after its call ended (one
	// read to its end is freed at once).
	TTL time.Duration
	// KeepAlive is the period of heartbeat records on an idle GET. Zero
	// means gradio.DefaultHeartbeatInterval.
	KeepAlive time.Duration
	// ClientID names a request's client for MaxPendingPerClient.
	ClientID func(r *http.Request) string
	// Start reads and admits the call r asks for (body, user, deadline,
	// the client's bound, a drain), calls hold with its endpoint, and
	// starts it when hold accepted it. eventID names the call (for logs).
	// When the call does not start, Start has answered r (a hold's
	// *Refusal in the host's error shape) and returns nil.
	Start func(w http.ResponseWriter, r *http.Request, eventID string, hold func(endpoint string) error) *StartedCall
	// Now is the clock (tests inject one). Nil means time.Now.
	Now func() time.Time
}

// Refusal is a POST the routes refuse (too many results kept), for the
// host to answer in its error shape.
type Refusal struct {
	Status     int
	Code       string
	Message    string
	RetryAfter int // seconds
}

func (e *Refusal) Error() string { return e.Code + ": " + e.Message }

// RunningCall is what the routes read of a call in flight.
type RunningCall interface {
	// Events delivers the call's updates; it is closed after the last.
	Events() <-chan gradio.Event
	// Wait returns the final outputs or the call's error.
	Wait(ctx context.Context) ([]json.RawMessage, error)
}

// StartedCall is a call CallsConfig.Start started. It outlives its POST.
type StartedCall struct {
	Call RunningCall
	// Ctx governs the call (the caller's deadline, the host's drain);
	// Stop cancels it at its app.
	Ctx  context.Context
	Stop func()
	// End reports how the call ended: nil when it completed,
	// ErrResultTooLarge when it was stopped for its output, else Wait's
	// error, for which it returns the data of the call's error record.
	End func(err error) any
	// Done frees what the call held; it is called last.
	Done func()
}

// Calls serves the /gradio_api/call routes. It needs no pool: the host
// runs the calls. It is safe for concurrent use.
type Calls struct {
	cfg     CallsConfig
	pending *pendingCalls
	// reclaimed are the calls whose unread output was dropped to make
	// room for another client's (reclaim); their run ends them as cut.
	reclaimed sync.Map // *pendingCall -> struct{}
}

// NewCalls returns the /gradio_api/call routes configured by cfg.
func NewCalls(cfg CallsConfig) *Calls {
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = gradio.DefaultHeartbeatInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ClientID == nil {
		cfg.ClientID = func(r *http.Request) string { return r.RemoteAddr }
	}
	p := newPendingCalls(cfg.MaxPending, cfg.TTL)
	p.maxPerClient = cfg.MaxPendingPerClient
	p.maxResult, p.maxBytes = cfg.MaxResultBytes, cfg.MaxBytes
	return &Calls{cfg: cfg, pending: p}
}

// Route is one HTTP route of the REST call API.
type Route struct {
	Pattern string
	Handler http.HandlerFunc
}

// Routes are the REST call routes, with the trailing-slash form Gradio
// accepts and the unprefixed paths of Gradio 4 recipes.
func (c *Calls) Routes() []Route {
	var rs []Route
	for _, prefix := range []string{"/gradio_api", ""} {
		rs = append(rs,
			Route{Pattern: "POST " + prefix + "/call/{api_name}", Handler: c.handlePost},
			Route{Pattern: "POST " + prefix + "/call/{api_name}/{$}", Handler: c.handlePost},
			Route{Pattern: "GET " + prefix + "/call/{api_name}/{event_id}", Handler: c.handleGet},
		)
	}
	return rs
}

// Kept is how many calls are kept for their GET, how many of them have
// ended, and the bytes of their unread output.
func (c *Calls) Kept() (calls, finished int, bytes int64) { return c.pending.count() }

// handlePost starts a call whose result is read by a later GET. The call
// outlives the POST: it runs under the host's context (CallsConfig.Start),
// so a drain lets it finish.
func (c *Calls) handlePost(w http.ResponseWriter, r *http.Request) {
	id := newEventID()
	var pc *pendingCall
	hold := func(endpoint string) error {
		pc = &pendingCall{apiName: endpoint, client: c.cfg.ClientID(r), changed: make(chan struct{})}
		if err := c.pending.add(id, pc, c.cfg.Now()); err != nil {
			e := &Refusal{Status: http.StatusServiceUnavailable, Code: "too_many_pending_calls",
				Message: "too many /gradio_api/call results are waiting to be read (max_pending_calls)", RetryAfter: 5}
			if errors.Is(err, errPendingPerClient) {
				e.Status = http.StatusTooManyRequests
				e.Message = "this client has too many /gradio_api/call results waiting to be read (max_pending_calls_per_client); read them first"
			}
			return e
		}
		return nil
	}
	sc := c.cfg.Start(w, r, id, hold)
	if sc == nil {
		c.pending.remove(id) // held, then not started: nothing to keep
		return
	}
	pc.mu.Lock()
	pc.stop = sc.Stop // for a cancel by its client
	pc.mu.Unlock()
	go c.run(sc, pc)
	writeJSON(w, http.StatusOK, map[string]string{"event_id": id})
}

// run keeps the records of a started call for its GET. Past
// max_pending_result_bytes unread (or everyone's max_pending_bytes) the
// call is stopped: its output would grow the gateway's heap for as long as
// nobody reads it.
func (c *Calls) run(sc *StartedCall, pc *pendingCall) {
	defer sc.Done()
	defer c.reclaimed.Delete(pc) // a mark left by a reclaim after its last look
	cut := false
	for ev := range sc.Call.Events() {
		if ev.Kind == gradio.EventOutput && !cut &&
			!c.push(pc, record{"generating", mustJSON(nonNil(ev.Data))}, false) {
			cut = true
			sc.Stop()
		}
	}
	out, err := sc.Call.Wait(sc.Ctx)
	if !cut && err == nil && !c.push(pc, record{"complete", mustJSON(nonNil(out))}, true) {
		cut = true
	}
	// Kept (counted by MaxBytes) or dropped: the output no longer counts
	// in the event budget.
	if r, ok := sc.Call.(interface{ Release() }); ok {
		r.Release()
	}
	if _, ok := c.reclaimed.LoadAndDelete(pc); ok {
		cut = true // its error record is in place already
	}
	switch {
	case cut:
		sc.End(ErrResultTooLarge)
		c.pending.push(pc, record{"error", mustJSON(map[string]any{"code": CodeResultTooLarge, "error": ErrResultTooLarge.Error()})},
			true, true, c.cfg.Now())
	case err != nil:
		payload := sc.End(err)
		c.pending.push(pc, record{"error", mustJSON(payload)}, true, true, c.cfg.Now())
	default:
		sc.End(nil)
	}
}

// push keeps a record of pc for its GET. When everyone's bound
// (MaxBytes) refuses it while pc's client holds less than its fair share
// of that bound (MaxBytes over the clients with unread output), the
// client holding the most past its own share loses its largest unread
// call (reclaim) and the record is kept: one client's unread results
// cannot take the bound from the others.
func (c *Calls) push(pc *pendingCall, r record, final bool) bool {
	if c.pending.push(pc, r, final, false, c.cfg.Now()) {
		return true
	}
	for range 8 { // each round frees one call: bounded
		victim, running := c.pending.reclaimFor(pc, int64(len(r.data))+int64(len(r.name)), c.cfg.Now())
		if victim == nil {
			return false
		}
		if running { // its run ends it as cut (and deletes the mark)
			c.reclaimed.Store(victim, struct{}{})
		}
		victim.mu.Lock()
		stop := victim.stop
		victim.mu.Unlock()
		if stop != nil {
			stop()
		}
		if c.pending.push(pc, r, final, false, c.cfg.Now()) {
			return true
		}
	}
	return false
}

// reclaimFor frees the largest unread call of the client most over its
// fair share of maxBytes, when pc's client (taking n more bytes) stays
// within its own; it returns the call freed (its records replaced by a
// result_too_large error record, its later records dropped) and whether
// it was still running; nil when none is.
func (p *pendingCalls) reclaimFor(pc *pendingCall, n int64, now time.Time) (*pendingCall, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.maxBytes <= 0 || (p.maxResult > 0 && pc.sizeOf()+n > p.maxResult) {
		return nil, false
	}
	perClient := map[string]int64{}
	largest := map[string]*pendingCall{}
	for _, c := range p.calls {
		sz := c.sizeOf()
		if sz == 0 {
			continue
		}
		perClient[c.client] += sz
		if l := largest[c.client]; l == nil || sz > l.sizeOf() {
			largest[c.client] = c
		}
	}
	clients := len(perClient)
	if _, ok := perClient[pc.client]; !ok {
		clients++
	}
	fair := p.maxBytes / int64(clients)
	if perClient[pc.client]+n > fair {
		return nil, false // over its own share: its call is the one cut
	}
	victim := ""
	for client, b := range perClient {
		if client != pc.client && b > fair && (victim == "" || b > perClient[victim]) {
			victim = client
		}
	}
	if victim == "" {
		return nil, false
	}
	v := largest[victim]
	v.mu.Lock()
	running := !v.done
	p.bytes -= v.size
	v.base += len(v.records) // a GET part-way through reads the error record next
	v.records = []record{{"error", mustJSON(map[string]any{"code": CodeResultTooLarge,
		"error": "gradiopool: this call's unread output was dropped: its client's unread /gradio_api/call results held more than their share of max_pending_bytes while another client's needed room"})}}
	v.size = 0
	v.gone = true // later records are dropped; the GET still reads the error record
	v.done = true
	v.finished = now
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
	return v, running
}

// sizeOf is the bytes of c's unread records.
func (c *pendingCall) sizeOf() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

// handleGet streams the records of a call started by handlePost, from the
// first; it ends after complete or error. Like Gradio, an unknown or
// expired event id is an `event: error` record with "404: Not Found"; so
// is the id of another client's call (ClientID: another key, or without
// keys another address): a result belongs to whoever started it, and an
// event id seen in a log or a URL is not a key to it.
func (c *Calls) handleGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("event_id")
	pc := c.pending.get(id, c.cfg.Now())
	if pc == nil || pc.apiName != r.PathValue("api_name") || pc.client != c.cfg.ClientID(r) {
		s := startCallSSE(w)
		_ = s.Event("error", mustJSON("404: Not Found"))
		return
	}
	s := startCallSSE(w)
	tick := time.NewTicker(c.cfg.KeepAlive)
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
			c.pending.remove(id)
			return
		}
		c.pending.consumed(pc, next)
		select {
		case <-changed:
		case <-tick.C:
			if s.Event("heartbeat", []byte("null")) != nil {
				return
			}
		case <-r.Context().Done():
			if !errors.Is(context.Cause(r.Context()), context.Canceled) {
				// The host stops (a drain), not the caller: the call is
				// being stopped too; its last record (an error naming
				// the drain) ends the stream, not a cut.
				c.finish(s, pc, next)
			}
			return
		}
	}
}

// drainGrace bounds finish's wait for a stopped call's last record.
const drainGrace = 5 * time.Second

// finish writes pc's records from next until its last one, for at most
// drainGrace.
func (c *Calls) finish(s *sse.Writer, pc *pendingCall, next int) {
	t := time.NewTimer(drainGrace)
	defer t.Stop()
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
		case <-t.C:
			return
		}
	}
}

// maxCancelBody bounds the body of a cancel read here: Gradio's is three
// short fields.
const maxCancelBody = 64 << 10

// Cancel wraps the front door's POST cancel (next; nil when there is no
// front door) so that it also cancels the calls started here: a cancel
// whose event_id names a call of this client (ClientID) stops it and
// answers what it did, {"success":true,"cancelled":true} for a call
// still running, {"success":false,"cancelled":false,...} for one that
// had ended. A cancel of an id unknown here goes on to next as it came;
// without next, or without a session_hash (next would find no session),
// it is a 404, as is the id of another client's call: one client can
// neither stop another's call nor learn that it exists.
func (c *Calls) Cancel(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCancelBody))
		if err != nil {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"detail": "the cancel body is too large or could not be read"})
			return
		}
		var m struct {
			EventID     string `json:"event_id"`
			SessionHash string `json:"session_hash"`
		}
		_ = json.Unmarshal(b, &m)
		pc := c.pending.get(m.EventID, c.cfg.Now())
		if pc != nil && pc.client == c.cfg.ClientID(r) {
			if pc.cancel() {
				writeJSON(w, http.StatusOK, map[string]any{"success": true, "cancelled": true})
			} else {
				writeJSON(w, http.StatusOK, map[string]any{"success": false, "cancelled": false, "detail": "the call had already ended"})
			}
			return
		}
		if next == nil || m.SessionHash == "" {
			writeJSON(w, http.StatusNotFound, map[string]any{"success": false, "detail": "no call with this event_id"})
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		next(w, r)
	}
}

// cancel stops the call unless it had ended; it reports whether it
// stopped it.
func (c *pendingCall) cancel() bool {
	c.mu.Lock()
	stop, done := c.stop, c.done
	c.mu.Unlock()
	if done || stop == nil {
		return false
	}
	stop()
	return true
}

// startCallSSE starts a GET's stream; a result is read once, so no cache
// may keep it.
func startCallSSE(w http.ResponseWriter) *sse.Writer {
	w.Header().Set("Cache-Control", "no-store")
	return sse.Start(w)
}

func newEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

func nonNil(d []json.RawMessage) []json.RawMessage {
	if d == nil {
		return []json.RawMessage{}
	}
	return d
}

// writeJSON answers v as the gateway answers JSON (its length, a final
// newline).
func writeJSON(w http.ResponseWriter, status int, v any) {
	b := append(mustJSON(v), '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
