package gradiotest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// wsTranscript is gradio/testdata/transcripts/gradio-3.50.2_reverse-file_ws.json:
// a real Gradio 3.50.2 server's WebSocket frames for one reverse_file call.
type wsTranscript struct {
	Payload string `json:"payload"`
	FnIndex int    `json:"fn_index"`
	Frames  []struct {
		From string `json:"from"`
		Text string `json:"text"`
	} `json:"frames"`
}

func newWSServer(t *testing.T) *gradiotest.Server {
	return newServer(t, gradiotest.DefaultApp(), func(s *gradiotest.Server) { s.Mode = gradiotest.Gradio3WS })
}

func dialWS(t *testing.T, ctx context.Context, s *gradiotest.Server) *websocket.Conn {
	t.Helper()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+"/queue/join", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if resp.Body != nil {
		resp.Body.Close()
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func readFrame(t *testing.T, ctx context.Context, c *websocket.Conn) map[string]json.RawMessage {
	t.Helper()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("frame %s: %v", b, err)
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestGradio3WSReplaysRecordedCall: the simulator in Gradio3WS mode has no
// protocol in /config, and answers the client frames of the recorded real
// 3.50.2 reverse_file call (upload first) with the same messages, each
// with the recorded fields, files as Gradio 3's dicts, and closes the
// socket after process_completed.
func TestGradio3WSReplaysRecordedCall(t *testing.T) {
	b, err := os.ReadFile("../testdata/transcripts/gradio-3.50.2_reverse-file_ws.json")
	if err != nil {
		t.Fatal(err)
	}
	var tr wsTranscript
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	s := newWSServer(t)
	var cfg map[string]any
	getJSON(t, s.URL+"/config", &cfg)
	if _, has := cfg["protocol"]; has || cfg["version"] != "3.50.2" {
		t.Errorf("config version %v, protocol %v: want 3.50.2 without protocol", cfg["version"], cfg["protocol"])
	}
	// Upload as the recorded client did.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("files", "payload.txt")
	_, _ = fw.Write([]byte(tr.Payload))
	_ = mw.Close()
	st, _, up := do(t, http.MethodPost, s.URL+"/upload", mw.FormDataContentType(), body.Bytes())
	var paths []string
	if st != 200 || json.Unmarshal(up, &paths) != nil || len(paths) != 1 {
		t.Fatalf("upload: %d %s", st, up)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := dialWS(t, ctx, s)
	var got map[string]json.RawMessage
	for i, f := range tr.Frames {
		if f.From == "client" {
			var m map[string]any
			if err := json.Unmarshal([]byte(f.Text), &m); err != nil {
				t.Fatal(err)
			}
			if d, ok := m["data"].([]any); ok {
				d[0].(map[string]any)["name"] = paths[0] // this server's upload
			}
			if err := c.Write(ctx, websocket.MessageText, mustJSON(t, m)); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			continue
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(f.Text), &want); err != nil {
			t.Fatal(err)
		}
		got = readFrame(t, ctx, c)
		if string(got["msg"]) != string(want["msg"]) {
			t.Fatalf("frame %d: msg %s, want %s", i, got["msg"], want["msg"])
		}
		if _, has := got["event_id"]; has {
			t.Errorf("frame %d (%s) has an event_id; Gradio 3 sends none", i, got["msg"])
		}
		for _, k := range sortedKeys(want) {
			if _, ok := got[k]; !ok && string(want["msg"]) != `"estimation"` {
				t.Errorf("frame %d (%s): field %s missing", i, got["msg"], k)
			}
		}
	}
	var out struct {
		Data []map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(got["output"], &out); err != nil || len(out.Data) != 1 {
		t.Fatalf("output %s: %v", got["output"], err)
	}
	fd := out.Data[0]
	if k := sortedKeys(fd); !slices.Equal(k, []string{"data", "is_file", "name", "orig_name", "size"}) {
		t.Errorf("file output keys %v, want Gradio 3's dict", k)
	}
	var name string
	_ = json.Unmarshal(fd["name"], &name)
	st, _, dl := do(t, http.MethodGet, s.URL+"/file="+name, "", nil)
	if want := reverse(tr.Payload); st != 200 || string(dl) != want {
		t.Errorf("download: %d %q, want %q", st, dl, want)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after process_completed: %v, want a normal close", err)
	}
}

func reverse(s string) string {
	r := []byte(s)
	slices.Reverse(r)
	return string(r)
}

// TestGradio3WSBadHello: a first frame without fn_index and session_hash
// closes the socket with a policy violation; the server stays usable.
func TestGradio3WSBadHello(t *testing.T) {
	s := newWSServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, hello := range []string{`{}`, `not json`, `{"fn_index": 0}`} {
		c := dialWS(t, ctx, s)
		readFrame(t, ctx, c) // send_hash
		if err := c.Write(ctx, websocket.MessageText, []byte(hello)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Errorf("hello %s: %v, want a policy-violation close", hello, err)
		}
	}
	if n := s.Executions("upper"); n != 0 {
		t.Errorf("%d executions after bad hellos", n)
	}
}

// TestGradio3WSQueueFull: a full queue is Gradio 3's queue_full message,
// then a close.
func TestGradio3WSQueueFull(t *testing.T) {
	s := newWSServer(t)
	s.UpdateKnobs(func(k *gradiotest.Knobs) { k.QueueFull = true })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := dialWS(t, ctx, s)
	readFrame(t, ctx, c)
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"fn_index": 0, "session_hash": "h"}`)); err != nil {
		t.Fatal(err)
	}
	if m := readFrame(t, ctx, c); string(m["msg"]) != `"queue_full"` {
		t.Errorf("got %v, want queue_full", m)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after queue_full: %v, want a normal close", err)
	}
}

// TestGradio3WSCloseCancels: closing the socket of a running call stops
// it (Gradio 3's cancel): its handler's context ends and the next call
// runs.
func TestGradio3WSCloseCancels(t *testing.T) {
	s := newWSServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	slow := -1
	var cfg struct {
		Dependencies []struct {
			APIName string `json:"api_name"`
		} `json:"dependencies"`
	}
	getJSON(t, s.URL+"/config", &cfg)
	for i, d := range cfg.Dependencies {
		if d.APIName == "slow" {
			slow = i
		}
	}
	c := dialWS(t, ctx, s)
	readFrame(t, ctx, c)
	_ = c.Write(ctx, websocket.MessageText, mustJSON(t, map[string]any{"fn_index": slow, "session_hash": "h"}))
	for {
		m := readFrame(t, ctx, c)
		if string(m["msg"]) == `"send_data"` {
			_ = c.Write(ctx, websocket.MessageText, mustJSON(t, map[string]any{"data": []any{3600}, "fn_index": slow, "session_hash": "h"}))
		}
		if string(m["msg"]) == `"process_starts"` {
			break
		}
	}
	waitFor(t, "the slow call to run", func() bool { return s.Executions("slow") == 1 })
	c.Close(websocket.StatusNormalClosure, "")
	// The next call of the same function (concurrency limit 1) runs only
	// if the closed one was stopped.
	c2 := dialWS(t, ctx, s)
	readFrame(t, ctx, c2)
	_ = c2.Write(ctx, websocket.MessageText, mustJSON(t, map[string]any{"fn_index": slow, "session_hash": "h2"}))
	for {
		m := readFrame(t, ctx, c2)
		switch string(m["msg"]) {
		case `"send_data"`:
			_ = c2.Write(ctx, websocket.MessageText, mustJSON(t, map[string]any{"data": []any{0}, "fn_index": slow, "session_hash": "h2"}))
		case `"process_completed"`:
			if !bytes.Contains(m["success"], []byte("true")) {
				t.Errorf("second call: %s", m["output"])
			}
			return
		}
	}
}

// TestGradio3WSServerCloseEndsSockets: closing the server ends sockets
// waiting for the client's first frame and sockets of running calls (the
// package's goleak check sees no handler left).
func TestGradio3WSServerCloseEndsSockets(t *testing.T) {
	s := newWSServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	idle := dialWS(t, ctx, s)
	readFrame(t, ctx, idle) // send_hash; no answer
	running := dialWS(t, ctx, s)
	readFrame(t, ctx, running)
	_ = running.Write(ctx, websocket.MessageText, []byte(`{"fn_index": 2, "session_hash": "h"}`))
	for {
		m := readFrame(t, ctx, running)
		if string(m["msg"]) == `"send_data"` {
			_ = running.Write(ctx, websocket.MessageText, []byte(`{"data": [3600], "fn_index": 2, "session_hash": "h"}`))
		}
		if string(m["msg"]) == `"process_starts"` {
			break
		}
	}
	s.Close()
	for name, c := range map[string]*websocket.Conn{"idle": idle, "running": running} {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				if ctx.Err() != nil {
					t.Errorf("%s socket still open after Close", name)
				}
				break
			}
		}
	}
}

// TestGradio3WSFrameBound: a client frame over the read limit (16 MiB)
// closes the socket; one of 1 MiB (large inputs; the library's default
// limit is 32 KiB) is read; the server stays usable.
func TestGradio3WSFrameBound(t *testing.T) {
	s := newWSServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ok := dialWS(t, ctx, s)
	readFrame(t, ctx, ok)
	_ = ok.Write(ctx, websocket.MessageText, []byte(`{"fn_index": 0, "session_hash": "`+strings.Repeat("y", 1<<20)+`"}`))
	if m := readFrame(t, ctx, ok); string(m["msg"]) != `"estimation"` {
		t.Errorf("a 1 MiB first frame: got %v, want estimation", m)
	}
	c := dialWS(t, ctx, s)
	readFrame(t, ctx, c)
	big := `{"fn_index": 0, "session_hash": "` + strings.Repeat("x", 16<<20) + `"}`
	_ = c.Write(ctx, websocket.MessageText, []byte(big))
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Errorf("a frame over the bound: %v, want a message-too-big close", err)
	}
	c2 := dialWS(t, ctx, s)
	if m := readFrame(t, ctx, c2); string(m["msg"]) != `"send_hash"` {
		t.Errorf("after the big frame: %v", m)
	}
}
