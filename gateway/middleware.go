package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
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
	if code == statusClientClosed {
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
		// Every answer may be a user's output, a key-protected statistic or
		// a file: no shared cache or browser keeps it.
		sw.Header().Set("Cache-Control", "no-store")
		la := &logAttrs{}
		ctx := context.WithValue(r.Context(), keyLogAttrs, la)
		r = r.WithContext(ctx)
		body := guardBody(sw, r, g.bodyTimeout)
		g.serveRecovered(sw, r, auth, h)
		body.done()
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		d := g.now().Sub(start)
		g.metrics.observeHTTP(route, sw.status, d)
		attrs := []slog.Attr{
			slog.String("request_id", reqID),
			slog.String("method", r.Method),
			slog.String("route", route),
			slog.String("path", clip(g.loggedPath(r), maxLoggedPath)),
			slog.Int("status", sw.status),
			slog.Int64("bytes", sw.bytes),
			slog.Float64("duration_ms", float64(d.Microseconds())/1000),
			slog.String("remote", remoteHost(r.RemoteAddr)),
		}
		if len(g.trusted) > 0 {
			if c := g.clientAddr(r); c != remoteHost(r.RemoteAddr) {
				attrs = append(attrs, slog.String("client", c)) // behind a trusted proxy
			}
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

// loggedPath is the request's path as the access log shows it: a
// /gradio_api/call event id, which reads the call's result, becomes its
// keyed hash.
func (g *Gateway) loggedPath(r *http.Request) string {
	if id := r.PathValue("event_id"); id != "" {
		return strings.Replace(r.URL.Path, id, "~"+g.backend.UserTag(id), 1)
	}
	return r.URL.Path
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

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// serveRecovered runs the handler; a panic becomes a JSON 500 "internal"
// (when nothing was written yet) and an error line with the stack, instead
// of a connection dropped without an answer. The panic's value is not
// logged or answered: it may hold call data.
func (g *Gateway) serveRecovered(sw *statusWriter, r *http.Request, auth authKind, h http.HandlerFunc) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v) // net/http's own way to abort a response
		}
		g.log.LogAttrs(r.Context(), slog.LevelError, "handler panic",
			slog.String("type", fmt.Sprintf("%T", v)), slog.String("stack", string(debug.Stack())))
		if sw.status == 0 {
			writeError(sw, &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "the gateway failed on this request"})
		} else {
			sw.status = http.StatusInternalServerError
		}
	}()
	g.serveAuthed(sw, r, auth, h)
}
