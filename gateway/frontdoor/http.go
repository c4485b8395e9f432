package frontdoor

// HTTP helpers of the front door: Gradio's error shape, relaying a
// replica's answer, bounded reads, the caller's event streams.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// maxSmallBody bounds the replica answers the gateway reads whole (join,
// cancel, info).
const maxSmallBody = 16 << 20

// detail writes Gradio's error shape {"detail": msg}.
func detail(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"detail": msg})
	_, _ = w.Write(b)
}

// relay writes a replica's answer (status, content type, body) as is.
func relay(w http.ResponseWriter, status int, ctype string, body []byte) {
	if ctype != "" {
		w.Header().Set("Content-Type", ctype)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func readSmall(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, maxSmallBody))
}

// readBody reads a caller's JSON body into a map.
func (f *FrontDoor) readBody(w http.ResponseWriter, r *http.Request) (map[string]json.RawMessage, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, f.conf().MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			detail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit))
		} else {
			detail(w, http.StatusBadRequest, "reading the body: "+err.Error())
		}
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		detail(w, http.StatusBadRequest, "the body must be a JSON object")
		return nil, false
	}
	return m, true
}

func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

func excerpt(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return strings.TrimSpace(string(b))
}

// startSSE starts the caller's queue/data or heartbeat stream: it carries
// the caller's outputs, which no cache may keep.
func startSSE(w http.ResponseWriter) *sse.Writer {
	w.Header().Set("Cache-Control", "no-store")
	return sse.Start(w)
}

// gradioDetail reports whether body is Gradio's error shape: a JSON object
// with a "detail" (FastAPI's HTTPException and validation answers).
func gradioDetail(body []byte) bool {
	var v map[string]json.RawMessage
	if json.Unmarshal(body, &v) != nil {
		return false
	}
	_, ok := v["detail"]
	return ok
}
