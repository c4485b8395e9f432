package gradiotest

import (
	"bytes"
	"net/http"
	"strings"
	"time"
)

// Hostile is a replica that misbehaves on purpose, to test that a client,
// pool or gateway in front of it stays within its bounds. The zero value
// is a well-behaved replica. Each mode leaves every other route normal, so
// a call gets as far as the misbehaving step.
type Hostile int

const (
	HostileOff Hostile = iota
	// HostileGarbageSSE answers queue/data with events whose data is not
	// JSON.
	HostileGarbageSSE
	// HostileEndlessLine answers queue/data with one "data:" line that
	// never ends.
	HostileEndlessLine
	// HostileEndlessEvent answers queue/data with "data:" lines and never
	// the blank line that ends an event.
	HostileEndlessEvent
	// HostileTrickleLine answers queue/data with one "data:" line of
	// HostileBytes, then one more byte a second, never ending the line:
	// a replica that holds a large partly read event without ever
	// stalling.
	HostileTrickleLine
	// HostileHugeConfig answers /config with a JSON object padded to
	// HostileBytes.
	HostileHugeConfig
	// HostileHugeJoinAnswer answers queue/join with 200 and a JSON object
	// padded to HostileBytes.
	HostileHugeJoinAnswer
)

// DefaultHostileBytes is how much a hostile answer sends at most when
// Knobs.HostileBytes is zero: far more than any bound of the client, yet
// finite, so that a test against a client without bounds ends (and fails)
// instead of hanging.
const DefaultHostileBytes = 256 << 20

// serveHostile answers r as mode says, and reports whether it did.
func (s *Server) serveHostile(w http.ResponseWriter, r *http.Request, k Knobs) bool {
	limit := k.HostileBytes
	if limit <= 0 {
		limit = DefaultHostileBytes
	}
	route := routeName(r.URL.Path, s.prefix())
	switch {
	case k.Hostile == HostileHugeConfig && route == "config",
		k.Hostile == HostileHugeJoinAnswer && route == "queue/join":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write([]byte(`{"event_id":"x","padding":"`)); err != nil {
			return true
		}
		s.repeat(w, r, []byte(strings.Repeat("x", 4096)), limit)
		_, _ = w.Write([]byte(`"}`))
		return true
	case route == "queue/data" && (k.Hostile == HostileGarbageSSE || k.Hostile == HostileEndlessLine || k.Hostile == HostileEndlessEvent || k.Hostile == HostileTrickleLine):
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		switch k.Hostile {
		case HostileGarbageSSE:
			s.repeat(w, r, []byte("data: <html>not json</html>\n\n"), limit)
		case HostileEndlessLine:
			if _, err := w.Write([]byte("data: ")); err == nil {
				s.repeat(w, r, bytes.Repeat([]byte("x"), 4096), limit)
			}
		case HostileEndlessEvent:
			s.repeat(w, r, []byte(`data: {"msg":"heartbeat"}`+"\n"), limit)
		case HostileTrickleLine:
			if _, err := w.Write([]byte("data: ")); err == nil {
				s.repeat(w, r, bytes.Repeat([]byte("x"), 4096), limit)
				s.trickle(w, r)
			}
		}
		return true
	}
	return false
}

// trickle writes a byte a second until the client goes away or the
// server closes.
func (s *Server) trickle(w http.ResponseWriter, r *http.Request) {
	f, _ := w.(http.Flusher)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if f != nil {
			f.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.baseCtx.Done():
			return
		case <-t.C:
		}
		if _, err := w.Write([]byte("x")); err != nil {
			return
		}
	}
}

// repeat writes chunk until limit bytes were written, the client went
// away or the server closes.
func (s *Server) repeat(w http.ResponseWriter, r *http.Request, chunk []byte, limit int) {
	f, _ := w.(http.Flusher)
	for sent := 0; sent < limit; sent += len(chunk) {
		if r.Context().Err() != nil || s.baseCtx.Err() != nil {
			return
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
		if f != nil && sent%(1<<20) < len(chunk) {
			f.Flush()
		}
	}
}
