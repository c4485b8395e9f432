package frontdoor

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestEveryAdmissionEndIsReportedOnce: a join that admission ends without
// a replica accepting it is reported to OnCall exactly once, with its
// code, and its count against its client's limit (BeginCall) is released
// exactly once, whichever step ended it: input the app refuses, an upload
// the gateway does not hold (before the typed outcome, that one was never
// reported), the caller's bad data for a file path.
func TestEveryAdmissionEndIsReportedOnce(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	defer sim.Close()
	p := poolOver(t, sim.URL, 2)
	var mu sync.Mutex
	var ends []CallEnd
	begun, released := 0, 0
	f, err := New(p, Config{
		QueueUpdateInterval: -1, // answers as they come: no wait shown
		OnCall: func(e CallEnd) {
			mu.Lock()
			ends = append(ends, e)
			mu.Unlock()
		},
		BeginCall: func(*http.Request) (func(), bool) {
			mu.Lock()
			begun++
			mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					mu.Lock()
					released++
					mu.Unlock()
				})
			}, true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"unknown fn_index", `{"fn_index": 999, "data": [], "session_hash": "o1"}`, http.StatusBadRequest, codeBadInput},
		{"upload not held", `{"fn_index": 0, "data": [{"path": "` + heldPrefix + `nosuch/f.txt", "meta": {"_type": "gradio.FileData"}}], "session_hash": "o2"}`, http.StatusBadRequest, codeBadInput},
		{"file path not handed out", `{"fn_index": 0, "data": [{"path": "` + filePrefix + `0/forged/etc/passwd", "meta": {"_type": "gradio.FileData"}}], "session_hash": "o3"}`, http.StatusBadRequest, codeBadInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			ends, begun, released = nil, 0, 0
			mu.Unlock()
			w := httptest.NewRecorder()
			f.handleJoin(w, httptest.NewRequest(http.MethodPost, "/gradio_api/queue/join", strings.NewReader(tc.body)))
			if w.Code != tc.status {
				t.Fatalf("status %d %s, want %d", w.Code, w.Body, tc.status)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(ends) != 1 || ends[0].Code != tc.code {
				t.Errorf("OnCall got %+v, want one end with code %q", ends, tc.code)
			}
			if begun != 1 || released != 1 {
				t.Errorf("BeginCall %d, released %d, want 1 and 1", begun, released)
			}
		})
	}
}
