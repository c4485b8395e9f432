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
	detailOf(status, msg).writeTo(w)
}

// answer is what a join's admission decided for its caller (placeJoin and
// what it calls decide; nothing there writes to the caller): accepted, or
// ended (its end code: refused, the caller's fault, lost, no replica, the
// caller gone), reported once (settle) and rendered once: as the HTTP
// answer to the join (writeTo), or, for a call whose caller was told it
// waits in the gateway's queue, as that call's process_completed
// (queuedEnded). An answer without a status is a caller that went away
// before anything was decided: nobody is told.
type answer struct {
	status int
	ctype  string
	body   []byte
	// retry asks the caller to come back in a second (Retry-After).
	retry bool
	// accepted: a replica (or the bridge) took the call; body is its
	// event id.
	accepted bool
	// full: the replica's own answer that its queue is full (Gradio's
	// 503), which a queued call's caller hears as Gradio's queue_full.
	full bool
	// end is how admission ended a call it did not accept (a CallEnd
	// code); "" on a refusal the join may still move past.
	end string
}

// ending is a with the call's end code.
func (a answer) ending(code string) answer {
	a.end = code
	return a
}

// detailOf is Gradio's error shape {"detail": msg}.
func detailOf(status int, msg string) answer {
	b, _ := json.Marshal(map[string]string{"detail": msg})
	return answer{status: status, ctype: "application/json", body: b, retry: status == http.StatusServiceUnavailable}
}

// relayed is a replica's answer, as it came.
func relayed(status int, ctype string, body []byte) answer {
	return answer{status: status, ctype: ctype, body: body}
}

func (a answer) writeTo(w http.ResponseWriter) {
	if a.status == 0 {
		a = detailOf(http.StatusServiceUnavailable, "gradiopool: the call ended before it was answered")
	}
	if a.retry {
		w.Header().Set("Retry-After", "1")
	}
	if a.ctype != "" {
		w.Header().Set("Content-Type", a.ctype)
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// message is a's Gradio detail, "" when it has none.
func (a answer) message() string {
	var d struct {
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(a.body, &d)
	return d.Detail
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
