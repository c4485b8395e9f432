package gradiotest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newServer starts a fast server (tiny step delay) and closes it at the end.
func newServer(t *testing.T, app *gradiotest.App, setup ...func(*gradiotest.Server)) *gradiotest.Server {
	t.Helper()
	s := gradiotest.NewUnstartedServer(app)
	s.StepDelay = time.Millisecond
	for _, f := range setup {
		f(s)
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func api(s *gradiotest.Server) string { return s.URL + s.Mode.APIPrefix() }

// do sends a request and returns status, headers and body.
func do(t *testing.T, method, url, contentType string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp.StatusCode, resp.Header, b
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	st, _, b := do(t, "GET", url, "", nil)
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, b)
		}
	}
	return st
}

func postJSON(t *testing.T, url string, body any, v any) int {
	t.Helper()
	st, _, b := do(t, "POST", url, "application/json", mustJSON(t, body))
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("POST %s: %v: %s", url, err, b)
		}
	}
	return st
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	if b, ok := v.([]byte); ok {
		return b
	}
	if s, ok := v.(string); ok {
		return []byte(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// join posts queue/join and returns the event id.
func join(t *testing.T, s *gradiotest.Server, session string, fn int, data ...any) string {
	t.Helper()
	if data == nil {
		data = []any{}
	}
	var r struct {
		EventID string `json:"event_id"`
	}
	if st := postJSON(t, api(s)+"/queue/join", map[string]any{"data": data, "fn_index": fn, "session_hash": session,
		"event_data": nil, "trigger_id": nil}, &r); st != 200 {
		t.Fatalf("join: status %d", st)
	}
	if len(r.EventID) != 32 {
		t.Fatalf("event id %q is not 32 hex", r.EventID)
	}
	return r.EventID
}

// record is one SSE record.
type record struct {
	event string
	data  []byte
	m     map[string]any
}

func (r record) msg() string { s, _ := r.m["msg"].(string); return s }

// readSSE reads SSE records until the stream ends.
func readSSE(t *testing.T, body io.Reader) ([]record, error) {
	t.Helper()
	var out []record
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var cur record
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != nil {
				_ = json.Unmarshal(cur.data, &cur.m)
				out = append(out, cur)
			}
			cur = record{}
		case strings.HasPrefix(line, "data: "):
			cur.data = []byte(strings.TrimPrefix(line, "data: "))
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		}
	}
	return out, sc.Err()
}

// stream GETs a URL and reads SSE records to the end.
func stream(t *testing.T, url string) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	recs, err := readSSE(t, resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return recs
}

func data(s *gradiotest.Server, session string) string {
	return api(s) + "/queue/data?session_hash=" + session
}

// msgs lists the msg names of records, skipping heartbeats.
func msgs(recs []record) []string {
	var out []string
	for _, r := range recs {
		if r.msg() != "heartbeat" {
			out = append(out, r.msg())
		}
	}
	return out
}

// keys returns the top-level keys of a JSON object in order.
func keys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", b)
	}
	var out []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func field(t *testing.T, b []byte, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m[name]
}

// waitFor polls cond (bounded).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 2000; i++ {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
