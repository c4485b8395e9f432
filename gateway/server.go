package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gradiopool/gradiopool/gradio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// UserHeader carries the caller's user (an e-mail); absent means anonymous.
const UserHeader = "X-Gradiopool-User"

// TimeoutHeader lets a caller give its own deadline for the call, as a Go
// duration ("90s") or seconds ("90"); past it the gateway answers 504.
const TimeoutHeader = "X-Gradiopool-Timeout"

// maxUserLen bounds the user header (an e-mail is at most 254 characters).
const maxUserLen = 320

// Gateway is the HTTP gateway over a [Backend]. Create it with [New]; it is
// an http.Handler, and [Gateway.Serve] runs it with graceful draining.
type Gateway struct {
	cfg     Config
	backend Backend
	log     *slog.Logger
	metrics *Metrics
	mux     *http.ServeMux
	hashKey []byte
	now     func() time.Time

	pending *pendingCalls

	// jobsCtx is the parent of calls that outlive their request (the
	// /gradio_api/call POST); cancelJobs ends them after a drain.
	jobsCtx    context.Context
	cancelJobs context.CancelFunc
	// jobs counts calls in flight (requests and detached calls), for drain.
	jobs     sync.WaitGroup
	inFlight atomic.Int64
	draining atomic.Bool
}

// New returns a gateway serving b with the normalized cfg (replicas are not
// needed here). logger nil means no logging; metrics nil means a new
// [Metrics] on its own registry.
func New(cfg Config, b Backend, logger *slog.Logger, metrics *Metrics) *Gateway {
	cfg.Normalize()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if metrics == nil {
		metrics = NewMetrics(b)
	}
	key := []byte(cfg.Secrets.HashKey)
	if len(key) == 0 {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	g := &Gateway{cfg: cfg, backend: b, log: logger, metrics: metrics, hashKey: key, now: time.Now}
	g.jobsCtx, g.cancelJobs = context.WithCancel(context.Background())
	g.pending = newPendingCalls(cfg.MaxPendingCalls, cfg.PendingCallTTL)
	g.routes()
	return g
}

// Metrics returns the gateway's metrics (to register hooks of the pool).
func (g *Gateway) Metrics() *Metrics { return g.metrics }

// HashUser is the keyed hash the gateway logs instead of an e-mail: the
// first 8 hex digits of HMAC-SHA256(hash key, normalised e-mail), the same
// prefix the pool logs as "user", so both lines of one call match.
func (g *Gateway) HashUser(user string) string { return HashUser(g.hashKey, user) }

// HashUser hashes a normalised e-mail with key; "" stays "".
func HashUser(key []byte, user string) string {
	if user == "" {
		return ""
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(NormalizeUser(user)))
	return hex.EncodeToString(m.Sum(nil))[:8]
}

// NormalizeUser trims and lower-cases an e-mail.
func NormalizeUser(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

func (g *Gateway) routes() {
	m := http.NewServeMux()
	api := func(pattern string, h http.HandlerFunc) { m.Handle(pattern, g.wrap(pattern, authAPI, h)) }
	admin := func(pattern string, h http.HandlerFunc) { m.Handle(pattern, g.wrap(pattern, authAdmin, h)) }
	open := func(pattern string, h http.HandlerFunc) { m.Handle(pattern, g.wrap(pattern, authNone, h)) }

	api("POST /v1/predict/{api_name}", g.handlePredict)
	api("POST /v1/submit/{api_name}", g.handleSubmit)
	// Gradio's REST shape, with the trailing-slash form Gradio accepts and
	// the unprefixed paths of Gradio 4 recipes.
	for _, prefix := range []string{"/gradio_api", ""} {
		api("POST "+prefix+"/call/{api_name}", g.handleCallPost)
		api("POST "+prefix+"/call/{api_name}/{$}", g.handleCallPost)
		api("GET "+prefix+"/call/{api_name}/{event_id}", g.handleCallGet)
	}
	admin("GET /api/admin/pool-stats", g.handleStats)
	admin("GET /metrics", g.metrics.handler().ServeHTTP)
	open("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	open("GET /readyz", g.handleReady)
	open("/", g.handleNoRoute)
	g.mux = m
}

// handleNoRoute answers 405 when the path exists for another method, else
// 404, both as JSON errors.
func (g *Gateway) handleNoRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if m == r.Method {
			continue
		}
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, pattern := g.mux.Handler(r2); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: r.Method + " " + r.URL.Path + ": use " + strings.Join(allow, " or ")})
		return
	}
	writeError(w, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no such route: " + r.Method + " " + r.URL.Path})
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

type authKind int

const (
	authNone authKind = iota
	authAPI
	authAdmin
)

// statusWriter records the status and size for the access log and metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	if code == StatusClientClosed {
		return
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// ctxKey keys request-scoped values.
type ctxKey int

const keyLogAttrs ctxKey = 0

// logAttrs collects attributes a handler adds to the access line.
type logAttrs struct {
	mu    sync.Mutex
	attrs []slog.Attr
}

func addLog(r *http.Request, a ...slog.Attr) {
	if la, ok := r.Context().Value(keyLogAttrs).(*logAttrs); ok {
		la.mu.Lock()
		la.attrs = append(la.attrs, a...)
		la.mu.Unlock()
	}
}

func (g *Gateway) wrap(pattern string, auth authKind, h http.HandlerFunc) http.Handler {
	route := pattern
	if i := strings.IndexByte(route, ' '); i >= 0 {
		route = route[i+1:]
	}
	if route == "/" {
		route = "other"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := g.now()
		sw := &statusWriter{ResponseWriter: w}
		reqID := r.Header.Get("X-Request-Id")
		if !validRequestID(reqID) {
			reqID = newID()[:16]
		}
		sw.Header().Set("X-Request-Id", reqID)
		la := &logAttrs{}
		ctx := context.WithValue(r.Context(), keyLogAttrs, la)
		r = r.WithContext(ctx)
		g.serveAuthed(sw, r, auth, h)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		d := g.now().Sub(start)
		g.metrics.observeHTTP(route, sw.status, d)
		attrs := []slog.Attr{
			slog.String("request_id", reqID),
			slog.String("method", r.Method),
			slog.String("route", route),
			slog.String("path", r.URL.Path),
			slog.Int("status", sw.status),
			slog.Int64("bytes", sw.bytes),
			slog.Float64("duration_ms", float64(d.Microseconds())/1000),
			slog.String("remote", remoteHost(r.RemoteAddr)),
		}
		la.mu.Lock()
		attrs = append(attrs, la.attrs...)
		la.mu.Unlock()
		level := slog.LevelInfo
		if route == "/healthz" || route == "/readyz" || route == "/metrics" {
			level = slog.LevelDebug
		}
		if sw.status >= 500 {
			level = slog.LevelWarn
		}
		g.log.LogAttrs(r.Context(), level, "http request", attrs...)
	})
}

// validRequestID accepts a caller's X-Request-Id for correlation when it
// is short and plain (so it cannot smuggle anything into the logs).
func validRequestID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func remoteHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

func (g *Gateway) serveAuthed(w http.ResponseWriter, r *http.Request, auth authKind, h http.HandlerFunc) {
	switch auth {
	case authAPI:
		if len(g.cfg.Secrets.APIKeys) > 0 {
			tok, ok := bearer(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="gradiopool"`)
				writeError(w, &apiError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "an API key is required: Authorization: Bearer <key>"})
				return
			}
			if !matchAny(tok, g.cfg.Secrets.APIKeys) {
				writeError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: "the API key is not valid"})
				return
			}
		}
	case authAdmin:
		if g.cfg.Secrets.AdminToken != "" {
			tok, ok := bearer(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="gradiopool-admin"`)
				writeError(w, &apiError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "the admin token is required: Authorization: Bearer <token>"})
				return
			}
			if !matchAny(tok, []string{g.cfg.Secrets.AdminToken}) {
				writeError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: "the admin token is not valid"})
				return
			}
		}
	}
	h(w, r)
}

func bearer(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	const p = "bearer "
	if len(v) <= len(p) || !strings.EqualFold(v[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(v[len(p):]), true
}

// matchAny compares tok with every key in constant time (per key), so the
// time taken does not tell which prefix matched.
func matchAny(tok string, keys []string) bool {
	ok := 0
	for _, k := range keys {
		ok |= subtle.ConstantTimeCompare([]byte(tok), []byte(k))
	}
	return ok == 1
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// callRequest is the body of every call endpoint (Gradio's shape).
type callRequest struct {
	Data json.RawMessage `json:"data"` // a list; absent is an error, null is []
}

// readCall decodes the body, the user and the optional deadline.
func (g *Gateway) readCall(w http.ResponseWriter, r *http.Request) (user string, args []any, apiName string, err *apiError) {
	apiName = strings.TrimPrefix(r.PathValue("api_name"), "/")
	if apiName == "" {
		return "", nil, "", badRequest("bad_request", "empty api_name")
	}
	user = NormalizeUser(r.Header.Get(UserHeader))
	if len(user) > maxUserLen || strings.IndexFunc(user, unicode.IsControl) >= 0 || strings.ContainsAny(user, " \t") {
		return "", nil, "", badRequest("bad_user", "the %s header must be one e-mail address", UserHeader)
	}
	if user != "" {
		addLog(r, slog.String("user", g.HashUser(user)))
	}
	// The body has a phase time-out of its own (the server has no
	// ReadTimeout, which would also bound the call); cleared once read.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(g.now().Add(DefaultBodyReadTimeout))
	body := http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes)
	b, rerr := io.ReadAll(body)
	_ = rc.SetReadDeadline(time.Time{})
	if rerr != nil {
		var mbe *http.MaxBytesError
		if errors.As(rerr, &mbe) {
			return "", nil, "", &apiError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
				Message: fmt.Sprintf("the request body is larger than %d bytes (max_body_bytes)", mbe.Limit)}
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
	var data []json.RawMessage
	if err := json.Unmarshal(req.Data, &data); err != nil {
		return "", nil, "", badRequest("bad_json", `"data" must be a list of the endpoint's inputs: {"data":[...]}`)
	}
	args = make([]any, len(data))
	for i, d := range data {
		args[i] = d
	}
	return user, args, apiName, nil
}

// callContext applies the caller's own deadline, if any.
func callContext(r *http.Request) (context.Context, context.CancelFunc, *apiError) {
	v := strings.TrimSpace(r.Header.Get(TimeoutHeader))
	if v == "" {
		ctx, cancel := context.WithCancel(r.Context())
		return ctx, cancel, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil {
			return nil, nil, badRequest("bad_timeout", "%s: %q is neither a duration (90s) nor seconds (90)", TimeoutHeader, v)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return nil, nil, badRequest("bad_timeout", "%s must be positive", TimeoutHeader)
	}
	ctx, cancel := context.WithTimeout(r.Context(), d)
	return ctx, cancel, nil
}

// track counts a call in flight for the drain; the returned func ends it.
func (g *Gateway) track() func() {
	g.jobs.Add(1)
	g.inFlight.Add(1)
	return func() { g.inFlight.Add(-1); g.jobs.Done() }
}

func (g *Gateway) failCall(w http.ResponseWriter, r *http.Request, endpoint string, err error) {
	e := toAPIError(err)
	g.metrics.callError(e.Code)
	addLog(r, slog.String("endpoint", endpoint), slog.String("error_code", e.Code), slog.String("error", e.Message))
	writeError(w, e)
}

func (g *Gateway) rejectDraining(w http.ResponseWriter) bool {
	if g.draining.Load() {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: "draining", Message: "the gateway is shutting down", RetryAfter: 1})
		return true
	}
	return false
}

// beginCall is the common start of /v1/predict and /v1/submit: refuse while
// draining, read the body and the caller's deadline. When ok is false the
// error answer has been written.
func (g *Gateway) beginCall(w http.ResponseWriter, r *http.Request) (user string, args []any, endpoint string, ctx context.Context, cancel context.CancelFunc, ok bool) {
	if g.rejectDraining(w) {
		return
	}
	user, args, endpoint, aerr := g.readCall(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	ctx, cancel, aerr = callContext(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	return user, args, endpoint, ctx, cancel, true
}

func (g *Gateway) handlePredict(w http.ResponseWriter, r *http.Request) {
	user, args, endpoint, ctx, cancel, ok := g.beginCall(w, r)
	if !ok {
		return
	}
	defer cancel()
	defer g.track()()
	start := g.now()
	res, err := g.backend.Predict(ctx, user, endpoint, args)
	d := g.now().Sub(start)
	if err != nil {
		g.failCall(w, r, endpoint, err)
		return
	}
	g.metrics.observeCall(res.Replica, res.Wait, d)
	addLog(r, slog.String("endpoint", endpoint), slog.String("replica", res.Replica))
	writeJSON(w, http.StatusOK, map[string]any{
		"data":        nonNil(res.Data),
		"replica":     res.Replica,
		"duration_ms": d.Milliseconds(),
	})
}

func nonNil(d []json.RawMessage) []json.RawMessage {
	if d == nil {
		return []json.RawMessage{}
	}
	return d
}

// sseWriter writes event-stream records and flushes each.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	_ = s.rc.Flush()
	return s
}

func (s *sseWriter) event(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sseWriter) comment(text string) error {
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (g *Gateway) handleSubmit(w http.ResponseWriter, r *http.Request) {
	user, args, endpoint, ctx, cancel, ok := g.beginCall(w, r)
	if !ok {
		return
	}
	defer cancel()
	defer g.track()()
	start := g.now()
	call, err := g.backend.Submit(ctx, user, endpoint, args)
	if err != nil {
		g.failCall(w, r, endpoint, err)
		return
	}
	wait := call.Waited()
	addLog(r, slog.String("endpoint", endpoint), slog.String("replica", call.Replica()))
	s := startSSE(w)
	_ = s.event("accepted", map[string]string{"replica": call.Replica()})
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
				writeErr = s.comment("keep-alive")
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
		e := toAPIError(err)
		g.metrics.callError(e.Code)
		addLog(r, slog.String("error_code", e.Code), slog.String("error", e.Message))
		if writeErr == nil {
			_ = s.event("error", map[string]*apiError{"error": e})
		}
		return
	}
	g.metrics.observeCall(call.Replica(), wait, d)
	if writeErr == nil {
		_ = s.event("complete", map[string]any{"data": nonNil(out), "replica": call.Replica(), "duration_ms": d.Milliseconds()})
	}
}

// writeEvent forwards one update; complete and error are written by the
// caller from Wait, so that they come exactly once.
func (g *Gateway) writeEvent(s *sseWriter, ev gradio.Event) error {
	switch ev.Kind {
	case gradio.EventQueued:
		return s.event("queued", map[string]any{"rank": ev.Rank, "queue_size": ev.QueueSize, "eta": ev.ETA.Seconds()})
	case gradio.EventStarted:
		return s.event("started", map[string]any{})
	case gradio.EventProgress:
		return s.event("progress", map[string]any{"progress": ev.Progress})
	case gradio.EventLog:
		return s.event("log", map[string]any{"log": ev.Log, "level": ev.Level})
	case gradio.EventOutput:
		return s.event("output", map[string]any{"data": nonNil(ev.Data)})
	}
	return nil
}

func (g *Gateway) handleStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, g.backend.Stats())
}

func (g *Gateway) handleReady(w http.ResponseWriter, r *http.Request) {
	if g.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "draining"})
		return
	}
	if !g.backend.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "no replica is usable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true})
}
