package fdtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// ReadGrace is frontdoor.read_grace's default, which tests wait out to
// see what the front door does with a join nobody reads.
const ReadGrace = 5 * time.Second

// ReplicaName is the pool's name of a simulated replica (its host:port),
// the key of the per-replica figures of the pool's and the front door's
// stats.
func ReplicaName(s *gradiotest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// FnIndex reads the front door's /config and returns the fn_index of
// apiName: callers address endpoints by the front door's numbering, which
// need not be a replica's.
func FnIndex(t testing.TB, base, apiName string) int {
	t.Helper()
	resp, err := http.Get(base + "/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /config: %d %s", resp.StatusCode, b)
	}
	cfg, err := gradio.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range cfg.Dependencies {
		if d.APIName == apiName {
			return d.FnIndex
		}
	}
	t.Fatalf("no endpoint %s in the front door's config", apiName)
	return -1
}

// Join posts one queue/join through the front door and returns the event
// id. It fails no test, so that goroutines other than the test's may join.
func Join(base, session string, fn int, data ...any) (string, error) {
	body, _ := json.Marshal(map[string]any{"data": data, "fn_index": fn, "session_hash": session, "event_data": nil, "trigger_id": nil})
	resp, err := http.Post(base+"/gradio_api/queue/join", "application/json", strings.NewReader(string(body)))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v struct {
		EventID string `json:"event_id"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &v) != nil || v.EventID == "" {
		return "", fmt.Errorf("join: %d %s", resp.StatusCode, b)
	}
	return v.EventID, nil
}

// JoinAt posts a queue/join of session hash to base with body (the JSON
// members before session_hash, e.g. `"data":["x"],"fn_index":0`) and
// returns its event id: for joins whose body a test spells out, or that
// reach one gateway of a cluster and are read at another.
func JoinAt(t testing.TB, base, hash, body string) string {
	t.Helper()
	resp, err := http.Post(base+"/gradio_api/queue/join", "application/json",
		strings.NewReader(`{`+body+`,"session_hash":"`+hash+`","event_data":null,"trigger_id":null}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var j struct {
		EventID string `json:"event_id"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &j) != nil || j.EventID == "" {
		t.Fatalf("join of %s at %s: %d %s", hash, base, resp.StatusCode, b)
	}
	return j.EventID
}

// BadJoin posts a join of an fn_index no replica has (real Gradio answers
// it 500, with a Python traceback from 5.0 to 6.8: the simulators' default
// mode) and returns the front door's answer: the caller's fault, which
// must never count against a replica.
func BadJoin(t testing.TB, base, session string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"data":["x"],"fn_index":999,"session_hash":%q,"event_data":null,"trigger_id":null}`, session)
	return post(t, base+"/gradio_api/queue/join", body)
}

// PostJSON posts body as JSON to u and returns the status and body,
// whatever the status: for requests whose refusal is what a test checks.
func PostJSON(t testing.TB, u string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	return post(t, u, string(b))
}

// post posts a JSON body and returns the answer's status and body.
func post(t testing.TB, u, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Stream reads one queue/data stream of session through the front door
// until close_stream (or its end) and returns the process_completed
// messages by event id. It fails no test, for goroutines other than the
// test's.
func Stream(base, session string) (map[string]map[string]any, error) {
	resp, err := http.Get(base + "/gradio_api/queue/data?session_hash=" + session)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	done := map[string]map[string]any{}
	err = eachData(resp.Body, func(m map[string]any) bool {
		switch m["msg"] {
		case "process_completed":
			if id, ok := m["event_id"].(string); ok {
				done[id] = m
			}
		case "close_stream":
			return false
		}
		return true
	})
	return done, err
}

// eachData calls f with each JSON message of the event stream r (data
// lines that are not JSON are skipped) until f returns false or the
// stream ends; it returns the stream's read error, nil when f stopped it.
func eachData(r io.Reader, f func(map[string]any) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(d), &m) != nil {
			continue
		}
		if !f(m) {
			return nil
		}
	}
	return sc.Err()
}

// Call is one whole call through the front door, as an official client
// makes it: join, then the session's stream until its process_completed;
// it returns the first output and fails the test when the call fails.
func Call(t testing.TB, base, session string, fn int, data ...any) string {
	t.Helper()
	out, err := CallErr(base, session, fn, data...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// CallErr is Call for goroutines other than the test's: it returns the
// failure instead.
func CallErr(base, session string, fn int, data ...any) (string, error) {
	id, err := Join(base, session, fn, data...)
	if err != nil {
		return "", err
	}
	done, err := Stream(base, session)
	if err != nil {
		return "", err
	}
	m := done[id]
	if m == nil || m["success"] != true {
		return "", fmt.Errorf("call %s of session %s: %v", id, session, m)
	}
	out, _ := m["output"].(map[string]any)
	data0, _ := out["data"].([]any)
	if len(data0) == 0 {
		return "", fmt.Errorf("call %s: no outputs: %v", id, m)
	}
	return fmt.Sprint(data0[0]), nil
}

// Messages opens session's queue/data stream through the front door and
// sends every message on the returned channel, closed at the stream's
// end, so that a test can watch a call's progress while it makes others.
// The stream is closed when the test ends.
func Messages(t testing.TB, base, session string) <-chan map[string]any {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return MessagesCtx(t, ctx, base, session)
}

// MessagesCtx is Messages whose stream ends with ctx, for tests of a
// caller that goes away.
func MessagesCtx(t testing.TB, ctx context.Context, base, session string) <-chan map[string]any {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/gradio_api/queue/data?session_hash="+session, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan map[string]any, 256)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		_ = eachData(resp.Body, func(m map[string]any) bool {
			select {
			case out <- m:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return out
}

// WaitMsg returns the first message of ch whose msg is want, skipping
// others; it fails the test after 10 s or at the stream's end, so that a
// message that never comes fails fast instead of hanging the test.
func WaitMsg(t testing.TB, ch <-chan map[string]any, want string) map[string]any {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before %s", want)
			}
			if m["msg"] == want {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s on the stream within 10 s", want)
		}
	}
}

// WaitFor polls cond every 5 ms until it holds, failing the test after
// 10 s: for states that settle asynchronously (a slot freed, a job
// ended), where a fixed sleep would be flaky or slow.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
