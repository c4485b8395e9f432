package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/sse"
	"github.com/gradiopool/gradiopool/pool"
)

// callRequest is the body of every call endpoint (Gradio's shape).
type callRequest struct {
	Data json.RawMessage `json:"data"` // a list, or an object of inputs by name; absent is an error, null is []
}

// readCall decodes the body, the user and the optional deadline.
func (g *Gateway) readCall(w http.ResponseWriter, r *http.Request) (user string, args []any, apiName string, err *apiError) {
	apiName = strings.TrimPrefix(r.PathValue("api_name"), "/")
	if apiName == "" {
		return "", nil, "", badRequest("bad_request", "empty api_name")
	}
	if len(apiName) > maxAPINameLen {
		return "", nil, "", badRequest("bad_request", "the api_name is %d bytes long, more than %d", len(apiName), maxAPINameLen)
	}
	user, uerr := pool.ParseUser(r.Header.Get(UserHeader))
	if uerr != nil {
		return "", nil, "", badRequest("bad_user", "the %s header must be one e-mail address", UserHeader)
	}
	if user != "" {
		addLog(r, slog.String("user", g.backend.UserTag(user)))
	}
	// The body's own phase time-out is set by wrap (see bodyGuard).
	body := http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes)
	b, rerr := io.ReadAll(body)
	if rerr != nil {
		var mbe *http.MaxBytesError
		if errors.As(rerr, &mbe) {
			return "", nil, "", &apiError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
				Message: fmt.Sprintf("the request body is larger than %d bytes (max_body_bytes)", mbe.Limit)}
		}
		if bodyTimedOut(rerr) {
			return "", nil, "", &apiError{Status: http.StatusRequestTimeout, Code: "body_timeout",
				Message: fmt.Sprintf("the request body did not arrive within %v", g.bodyTimeout)}
		}
		return "", nil, "", badRequest("bad_request", "reading the body: %v", rerr)
	}
	var req callRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	if derr := dec.Decode(&req); derr != nil {
		return "", nil, "", badRequest("bad_json", `the body must be JSON {"data":[...]}: %v`, derr)
	}
	if dec.More() {
		return "", nil, "", badRequest("bad_json", `the body must be one JSON object {"data":[...]}`)
	}
	if len(req.Data) == 0 {
		return "", nil, "", badRequest("bad_json", `the body must have a "data" list: {"data":[...]}`)
	}
	// An object passes the inputs by parameter name, as gradio.Kwargs does
	// in the library and `gradiopool call` on the command line: parameters
	// left out take their defaults (from the app's /info).
	if t := bytes.TrimLeft(req.Data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		var kw map[string]json.RawMessage
		if err := json.Unmarshal(req.Data, &kw); err != nil {
			return "", nil, "", badRequest("bad_json", `"data" must be a list of the endpoint's inputs or an object of them by name: %v`, err)
		}
		named := make(gradio.Kwargs, len(kw))
		for k, v := range kw {
			named[k] = v
		}
		return user, []any{named}, apiName, nil
	}
	var data []json.RawMessage
	if err := json.Unmarshal(req.Data, &data); err != nil {
		return "", nil, "", badRequest("bad_json", `"data" must be a list of the endpoint's inputs {"data":[...]} or an object of them by name {"data":{"text":"hi"}}`)
	}
	args = make([]any, len(data))
	for i, d := range data {
		args[i] = d
	}
	return user, args, apiName, nil
}

// deadlineContext derives the call's context from parent with the
// caller's own deadline (TimeoutHeader), if any.
func deadlineContext(parent context.Context, r *http.Request) (context.Context, context.CancelFunc, *apiError) {
	d, aerr := parseTimeout(r.Header.Get(TimeoutHeader))
	if aerr != nil {
		return nil, nil, aerr
	}
	if d == 0 {
		ctx, cancel := context.WithCancel(parent)
		return ctx, cancel, nil
	}
	ctx, cancel := context.WithTimeout(parent, d)
	return ctx, cancel, nil
}

// maxCallerTimeout bounds TimeoutHeader: larger values are refused rather
// than overflowing a time.Duration.
const maxCallerTimeout = 24 * time.Hour

// parseTimeout reads a TimeoutHeader value: a Go duration ("90s") or
// seconds ("90", "1.5"); "" is 0 (none).
func parseTimeout(v string) (time.Duration, *apiError) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	if len(v) > 32 {
		return 0, badRequest("bad_timeout", "%s: %d characters is not a duration (90s) or seconds (90)", TimeoutHeader, len(v))
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil {
			return 0, badRequest("bad_timeout", "%s: %q is neither a duration (90s) nor seconds (90)", TimeoutHeader, v)
		}
		if !(secs > 0) { // also NaN
			return 0, badRequest("bad_timeout", "%s must be positive", TimeoutHeader)
		}
		if secs > maxCallerTimeout.Seconds() {
			return 0, badRequest("bad_timeout", "%s: %q is longer than the maximum %v", TimeoutHeader, v, maxCallerTimeout)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return 0, badRequest("bad_timeout", "%s must be positive", TimeoutHeader)
	}
	if d > maxCallerTimeout {
		return 0, badRequest("bad_timeout", "%s: %q is longer than the maximum %v", TimeoutHeader, v, maxCallerTimeout)
	}
	return d, nil
}

// errorLogAttrs are the log fields of a failed call. An app's error text
// (gr.Error) often quotes the user's input, e-mails included, so it is
// logged as its length and a keyed hash (the users' key: equal texts
// match, the text is not readable); the gateway's own messages are logged
// as they are.
func (g *Gateway) errorLogAttrs(e *apiError) []slog.Attr {
	if e.Code != codeAppError {
		return []slog.Attr{slog.String("error_code", e.Code), slog.String("error", e.Message)}
	}
	return []slog.Attr{slog.String("error_code", e.Code), slog.Int("error_len", len(e.Message)), slog.String("error_hash", g.backend.UserTag(e.Message))}
}

// failCall answers a call that failed before it started (no replica
// took it, or the last one refused it), counts it under route and notes it
// on the access line.
func (g *Gateway) failCall(w http.ResponseWriter, r *http.Request, route, endpoint string, d time.Duration, err error) {
	e := callError(r.Context(), err)
	replica := errReplica(err)
	if !errors.Is(err, gradio.ErrUnknownEndpoint) {
		// A made-up name is the caller's 404 and no call: it gets no
		// row in the metrics or the history.
		g.metrics.observeCall(CallRecord{Route: route, Replica: replica, Endpoint: endpoint, Total: d, Code: e.Code})
	}
	addLog(r, slog.String("endpoint", endpoint))
	addLog(r, g.errorLogAttrs(e)...)
	if replica != "" {
		addLog(r, slog.String("replica", replica))
	}
	writeError(w, e)
}

// v1Call is what a /v1/predict or /v1/submit request asks for.
type v1Call struct {
	user     string
	endpoint string
	args     []any
	opts     pool.CallOptions // the caller's priority class
}

// beginCall is the common start of /v1/predict and /v1/submit: refuse while
// draining, read the body, the caller's priority class and deadline. When
// ok is false the error answer has been written.
func (g *Gateway) beginCall(w http.ResponseWriter, r *http.Request) (c v1Call, ctx context.Context, cancel context.CancelFunc, ok bool) {
	if g.rejectDraining(w) {
		return
	}
	user, args, endpoint, aerr := g.readCall(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	c = v1Call{user: user, endpoint: endpoint, args: args}
	c.opts.Party = g.eventParty(r)
	release, counted := g.beginClientCall(w, r)
	if !counted {
		return
	}
	if c.opts.Priority, aerr = callPriority(r); aerr != nil {
		release()
		writeError(w, aerr)
		return
	}
	ctx, cancel0, aerr := deadlineContext(r.Context(), r)
	if aerr != nil {
		release()
		writeError(w, aerr)
		return
	}
	// The pool's events of this call (failovers) carry its door.
	ctx = pool.WithRoute(ctx, routeV1)
	return c, ctx, func() { cancel0(); release() }, true
}

func (g *Gateway) handlePredict(w http.ResponseWriter, r *http.Request) {
	c, ctx, cancel, ok := g.beginCall(w, r)
	if !ok {
		return
	}
	endpoint := c.endpoint
	defer cancel()
	defer g.track()()
	start := g.now()
	res, err := g.backend.Predict(ctx, c.user, c.opts, endpoint, c.args)
	d := g.now().Sub(start)
	if err != nil {
		g.failCall(w, r, routeV1, endpoint, d, err)
		return
	}
	if res.release != nil {
		defer res.release() // the output counts in the event budget until written
	}
	g.metrics.observeCall(CallRecord{Route: routeV1, Replica: res.Replica, Endpoint: endpoint, Wait: res.Wait, Total: d})
	addLog(r, slog.String("endpoint", endpoint), slog.String("replica", res.Replica))
	writePrediction(w, res.Data, res.Replica, d.Milliseconds())
}

func nonNil(d []json.RawMessage) []json.RawMessage {
	if d == nil {
		return []json.RawMessage{}
	}
	return d
}

// writePrediction writes /v1/predict's answer, {"data": [...],
// "duration_ms": ms, "replica": name}, without building it in memory
// first: the outputs are written as the Go client parsed them (valid
// JSON, up to 64 MiB each). json.Marshal would copy each into a buffer
// that grows by doubling, then the answer once more: several times the
// output's size in garbage per call, which is most of the gateway's
// memory beside a caller of large outputs (issue 33).
func writePrediction(w http.ResponseWriter, data []json.RawMessage, replica string, ms int64) {
	name, _ := json.Marshal(replica)
	head := []byte(`{"data":[`)
	tail := fmt.Appendf(nil, `],"duration_ms":%d,"replica":%s}`+"\n", ms, name)
	n := len(head) + len(tail)
	for i, v := range data {
		if i > 0 {
			n++
		}
		if len(v) == 0 {
			v = json.RawMessage("null")
		}
		n += len(v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(head)
	for i, v := range data {
		if i > 0 {
			_, _ = w.Write([]byte{','})
		}
		if len(v) == 0 {
			v = json.RawMessage("null")
		}
		_, _ = w.Write(v)
	}
	_, _ = w.Write(tail)
}

// startSSE starts a /v1 or /gradio_api/call event stream.
func startSSE(w http.ResponseWriter) *sse.Writer {
	w.Header().Set("Cache-Control", "no-store")
	return sse.Start(w)
}

// sendEvent writes one event whose data is v in JSON.
func sendEvent(s *sse.Writer, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.Event(name, b)
}

func (g *Gateway) handleSubmit(w http.ResponseWriter, r *http.Request) {
	c, ctx, cancel, ok := g.beginCall(w, r)
	if !ok {
		return
	}
	endpoint := c.endpoint
	defer cancel()
	defer g.track()()
	start := g.now()
	// While the call waits for a slot (every session busy) the stream
	// starts and carries its place in the gateway's queue (waiting).
	var smu sync.Mutex
	var s *sse.Writer
	qw := new(pool.QueueWatch)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		showWaiting(qw, stop, func(pos pool.QueuePosition) {
			smu.Lock()
			defer smu.Unlock()
			if s == nil {
				s = startSSE(w)
			}
			_ = sendEvent(s, "waiting", waitingEvent(pos))
		})
	})
	opts := c.opts
	opts.Watch = qw
	call, err := g.backend.Submit(ctx, c.user, opts, endpoint, c.args)
	close(stop)
	wg.Wait()
	if err != nil && s != nil {
		// The stream started: the error is its last event.
		e := callError(r.Context(), err)
		g.metrics.observeCall(CallRecord{Route: routeV1, Replica: errReplica(err), Endpoint: endpoint, Total: g.now().Sub(start), Code: e.Code})
		addLog(r, slog.String("endpoint", endpoint))
		addLog(r, g.errorLogAttrs(e)...)
		_ = sendEvent(s, "error", map[string]*apiError{"error": e})
		return
	}
	if err != nil {
		g.failCall(w, r, routeV1, endpoint, g.now().Sub(start), err)
		return
	}
	defer releaseCall(call) // the output counts in the event budget until written
	wait := call.Waited()
	addLog(r, slog.String("endpoint", endpoint), slog.String("replica", call.Replica()))
	if s == nil {
		s = startSSE(w)
	}
	_ = sendEvent(s, "accepted", map[string]string{"replica": call.Replica()})
	tick := time.NewTicker(g.cfg.KeepAliveInterval)
	defer tick.Stop()
	events := call.Events()
	writeErr := error(nil)
	for events != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				break
			}
			if writeErr == nil {
				writeErr = g.writeEvent(s, ev)
			}
		case <-tick.C:
			if writeErr == nil {
				writeErr = s.Comment("keep-alive")
			}
		case <-ctx.Done():
			// The caller went away or its deadline passed: the backend
			// cancels the job; drain its last events so the session is
			// back in the pool before this handler returns.
			for range events {
			}
			events = nil
		}
	}
	out, err := call.Wait(ctx)
	d := g.now().Sub(start)
	if err != nil {
		e := callError(r.Context(), err)
		g.metrics.observeCall(CallRecord{Route: routeV1, Replica: call.Replica(), Endpoint: endpoint, Wait: wait, Total: d, Code: e.Code})
		addLog(r, g.errorLogAttrs(e)...)
		if writeErr == nil {
			_ = sendEvent(s, "error", map[string]*apiError{"error": e})
		}
		return
	}
	g.metrics.observeCall(CallRecord{Route: routeV1, Replica: call.Replica(), Endpoint: endpoint, Wait: wait, Total: d})
	if writeErr == nil {
		_ = sendEvent(s, "complete", map[string]any{"data": nonNil(out), "replica": call.Replica(), "duration_ms": d.Milliseconds()})
	}
}

// waitingInterval bounds how often a /v1/submit call waiting for a slot
// gets a waiting event: at most one per interval, only when its place
// changed (a deep queue that moves sends no storm).
const waitingInterval = 500 * time.Millisecond

// showWaiting calls show with the call's place in the gateway's queue
// when it starts waiting and whenever its rank, the queue's size, whether
// an ETA is known or whether it waits for a wake changed, polled every
// waitingInterval, until stop.
func showWaiting(qw *pool.QueueWatch, stop <-chan struct{}, show func(pool.QueuePosition)) {
	select {
	case <-stop:
		return
	case <-qw.Waited():
	}
	t := time.NewTicker(waitingInterval)
	defer t.Stop()
	last := pool.QueuePosition{Rank: -1}
	for {
		if pos, ok := qw.Position(); ok && (pos.Rank != last.Rank || pos.Size != last.Size || pos.ETAKnown != last.ETAKnown || pos.Waking != last.Waking) {
			last = pos
			show(pos)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// waitingEvent is the data of a waiting event: rank (0-based) and size
// of the gateway's queue for a session of the replica, eta in seconds
// (null until a call was measured). While every replica is parked
// (autoscale) and the call waits for a wake, waking is true, rank and
// queue_size are its place among the calls waiting so, and eta is the
// time until the wake the policy expects (null until it has woken a
// Space).
func waitingEvent(pos pool.QueuePosition) map[string]any {
	var eta any
	if pos.ETAKnown {
		eta = math.Round(pos.ETA.Seconds()*1000) / 1000
	}
	ev := map[string]any{"rank": max(pos.Rank, 0), "queue_size": max(pos.Size, pos.Rank+1, 1), "eta": eta}
	if pos.Waking {
		ev["waking"] = true
	}
	return ev
}

// writeEvent forwards one update; complete and error are written by the
// caller from Wait, so that they come exactly once.
func (g *Gateway) writeEvent(s *sse.Writer, ev gradio.Event) error {
	switch ev.Kind {
	case gradio.EventQueued:
		return sendEvent(s, "queued", map[string]any{"rank": ev.Rank, "queue_size": ev.QueueSize, "eta": ev.ETA.Seconds()})
	case gradio.EventStarted:
		return sendEvent(s, "started", map[string]any{})
	case gradio.EventProgress:
		return sendEvent(s, "progress", map[string]any{"progress": ev.Progress})
	case gradio.EventLog:
		return sendEvent(s, "log", map[string]any{"log": ev.Log, "level": ev.Level})
	case gradio.EventOutput:
		return sendEvent(s, "output", map[string]any{"data": nonNil(ev.Data)})
	}
	return nil
}
