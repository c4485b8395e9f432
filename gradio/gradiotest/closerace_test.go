package gradiotest_test

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// flushRecorder is a ResponseWriter that keeps what each Flush sent: the
// bytes a client receives together.
type flushRecorder struct {
	mu      sync.Mutex
	header  http.Header
	pending bytes.Buffer
	flushes []string
}

func (f *flushRecorder) Header() http.Header { return f.header }
func (f *flushRecorder) WriteHeader(int)     {}

func (f *flushRecorder) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending.Write(b)
}

func (f *flushRecorder) Flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending.Len() > 0 {
		f.flushes = append(f.flushes, f.pending.String())
		f.pending.Reset()
	}
}

// TestLastCompletionAndCloseStreamInOneWrite: on sse_v3, the
// process_completed that leaves a session with no pending event and the
// close_stream after it reach the client in one write. Real Gradio yields
// the two in one turn of its event loop (routes.py queue_data_helper), so
// no join is answered between them. Written apart, a client's next join
// can be answered in between: @gradio/client 2.7.0 then puts the call on
// the stream it is about to close and never reads its messages, which hung
// the JS conformance suite's predict/slow on the simulated 4.44.
func TestLastCompletionAndCloseStreamInOneWrite(t *testing.T) {
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio4SSEv3, gradiotest.Gradio5, gradiotest.Gradio6} {
		for _, tc := range []struct {
			name string
			// run joins a call in session and makes it complete.
			run func(t *testing.T, s *gradiotest.Server, session string)
		}{
			{"completed", func(t *testing.T, s *gradiotest.Server, session string) {
				join(t, s, session, 1, "x") // echo
			}},
			{"cancelled", func(t *testing.T, s *gradiotest.Server, session string) {
				id := join(t, s, session, 0, "x") // block
				waitFor(t, "handler start", func() bool { return s.Executions("block") == 1 })
				postJSON(t, api(s)+"/cancel", map[string]any{"session_hash": session, "fn_index": 0, "event_id": id}, nil)
			}},
		} {
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				var started, cancelled atomic.Int32
				s := newServer(t, blocking(&started, &cancelled), func(s *gradiotest.Server) { s.Mode = mode })
				tc.run(t, s, "s")
				// The stream ends by itself after close_stream; the deadline
				// is a hang guard.
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", data(s, "s"), nil)
				rec := &flushRecorder{header: http.Header{}}
				s.ServeHTTP(rec, req)
				rec.Flush()
				// The messages of each flush, for the flushes with either.
				var got [][]string
				for _, b := range rec.flushes {
					recs, err := readSSE(t, strings.NewReader(b))
					if err != nil {
						t.Fatal(err)
					}
					m := msgs(recs)
					if slices.Contains(m, "process_completed") || slices.Contains(m, "close_stream") {
						got = append(got, m)
					}
				}
				if len(got) != 1 || !slices.Equal(got[0][len(got[0])-2:], []string{"process_completed", "close_stream"}) {
					t.Errorf("messages by flush %q, want process_completed and close_stream in one", got)
				}
			})
		}
	}
}
