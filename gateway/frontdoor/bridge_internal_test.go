package frontdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// TestBridgeQueueBound: a caller that does not read its stream while a
// generator yields far more than maxBridgeOut outputs keeps at most
// maxBridgeOut messages queued, and never loses a completion.
func TestBridgeQueueBound(t *testing.T) {
	b := &bridgeState{jobs: map[string]*bridgeJob{}, wake: make(chan struct{}, 1)}
	b.mu.Lock()
	b.push([]byte(`{"msg":"process_completed","event_id":"first","output":{},"success":true}`))
	b.push([]byte(`{"msg":"process_generating","event_id":"gen","output":{"data":["base"]}}`))
	for i := range 3 * maxBridgeOut {
		b.push(fmt.Appendf(nil, `{"msg":"process_generating","event_id":"gen","n":%d,"output":{"data":[[["replace",[],"x"]]]}}`, i))
	}
	b.push([]byte(`{"msg":"process_completed","event_id":"gen","output":{},"success":true}`))
	b.mu.Unlock()
	msgs, idle := b.take()
	if len(msgs) > maxBridgeOut {
		t.Errorf("%d messages queued, want at most %d", len(msgs), maxBridgeOut)
	}
	if !idle {
		t.Error("no call left, but the stream is not told it may close")
	}
	completions := 0
	for _, m := range msgs {
		if bytes.Contains(m, []byte(`"process_completed"`)) {
			completions++
		}
	}
	if completions != 2 || !bytes.Contains(msgs[len(msgs)-1], []byte(`"process_completed","event_id":"gen"`)) {
		t.Errorf("%d completions kept (want 2), last message %s", completions, msgs[len(msgs)-1])
	}
	if !bytes.Contains(msgs[len(msgs)-2], fmt.Appendf(nil, `"n":%d`, 3*maxBridgeOut-1)) {
		t.Errorf("the newest output was dropped: %s", msgs[len(msgs)-2])
	}
	if !bytes.Contains(msgs[1], []byte(`"data":["base"]`)) {
		t.Errorf("the generator's first output, the base of its diffs, was dropped: %s", msgs[1])
	}
}

// TestBridgeQueueByteBound: a caller that does not read its stream while
// a generator yields large outputs keeps at most maxBridgeOutBytes of
// them queued (and the message being added), long before maxBridgeOut
// messages: 64 outputs of 1 MiB were all kept before. Completions and the
// newest output stay.
func TestBridgeQueueByteBound(t *testing.T) {
	b := &bridgeState{jobs: map[string]*bridgeJob{}, wake: make(chan struct{}, 1)}
	big := bytes.Repeat([]byte("g"), 1<<20)
	b.mu.Lock()
	b.push([]byte(`{"msg":"process_completed","event_id":"first","output":{},"success":true}`))
	for i := range 64 {
		if i == 0 { // the first output is whole; later ones "replace" diffs of it (bridgeConv)
			b.push(fmt.Appendf(nil, `{"msg":"process_generating","event_id":"gen","n":%d,"output":{"data":["%s"]}}`, i, big))
			continue
		}
		b.push(fmt.Appendf(nil, `{"msg":"process_generating","event_id":"gen","n":%d,"output":{"data":[[["replace",[],"%s"]]]}}`, i, big))
	}
	b.push([]byte(`{"msg":"process_completed","event_id":"gen","output":{},"success":true}`))
	b.mu.Unlock()
	msgs, _ := b.take()
	size := 0
	for _, m := range msgs {
		size += len(m)
	}
	if len(msgs) == 66 || size > maxBridgeOutBytes+len(big)+100 {
		t.Errorf("%d bytes queued in %d messages, want at most about %d", size, len(msgs), maxBridgeOutBytes)
	}
	if !bytes.HasPrefix(msgs[0], []byte(`{"msg":"process_completed","event_id":"first"`)) ||
		!bytes.Contains(msgs[len(msgs)-1], []byte(`"process_completed","event_id":"gen"`)) ||
		!bytes.Contains(msgs[len(msgs)-2], []byte(`"n":63,`)) || !bytes.Contains(msgs[1], []byte(`"n":0,`)) {
		t.Errorf("a completion, the first output or the newest was dropped (%d messages kept)", len(msgs))
	}
	if b.outSize != 0 {
		t.Errorf("take left %d bytes counted", b.outSize)
	}
}

// TestBridgeSessionExpiryCancelsCalls: an expiring caller session cancels
// its bridged calls and closes its bridge, so that no Go job outlives it.
func TestBridgeSessionExpiryCancelsCalls(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := newTestDoor(t, Config{SessionTTL: time.Hour, Now: clk.now})
	ctx := context.Background()
	s := f.session(ctx, "old", "", true)
	s.setBinding(binding{Replica: "r1", Backend: "gp1"})
	br := s.bridgeOf(true)
	jctx, cancel := context.WithCancel(context.Background())
	br.mu.Lock()
	br.jobs["e1"] = &bridgeJob{cancel: cancel}
	br.mu.Unlock()
	clk.add(2 * time.Hour)
	f.sweep()
	if jctx.Err() == nil {
		t.Error("the expired session's call was not cancelled")
	}
	if _, err := br.session("r1", nil); err != gradio.ErrClosed {
		t.Errorf("the expired session's bridge still makes sessions: %v", err)
	}
}

// TestBridgeOutputs: State outputs come back as null where the app's
// dependency has them, and file outputs of every 4.x shape (url null in
// sse_v1, no meta before) get signed gateway URLs in Gradio 5's FileData
// shape.
func TestBridgeOutputs(t *testing.T) {
	f := newTestDoor(t, Config{})
	raw := []byte(`{"version":"4.16.0","protocol":"sse_v1","components":[{"id":1,"type":"textbox","props":{}},{"id":2,"type":"state","props":{}},{"id":3,"type":"file","props":{}}],` +
		`"dependencies":[{"targets":[[1,"click"]],"inputs":[1,2],"outputs":[1,2,3],"backend_fn":true,"api_name":"f","types":{"generator":false}}]}`)
	cfg, err := gradio.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := &bridgeConv{f: f, cfg: cfg, dep: &cfg.Dependencies[0], idx: 0, gw: "http://gw", pre: bridgePrefix, modern: true}
	f.fileIDs = []string{"r1"}
	out := c.outputs([]json.RawMessage{
		json.RawMessage(`"text"`),
		json.RawMessage(`{"path":"/tmp/gradio/abc/out.bin","url":null,"size":3,"orig_name":"out.bin","mime_type":null}`),
	})
	if len(out) != 3 || string(out[0]) != `"text"` || string(out[1]) != "null" {
		t.Fatalf("outputs %s, want text, null (State), file", out)
	}
	var fd map[string]any
	if err := json.Unmarshal(out[2], &fd); err != nil {
		t.Fatal(err)
	}
	p, _ := fd["path"].(string)
	if !strings.HasPrefix(p, filePrefix+"0/") || fd["url"] != "http://gw/gradio_api/file="+p {
		t.Errorf("file output %s: want a signed gateway path and URL", out[2])
	}
	if idx, orig, ok := f.verifyFile(p); !ok || idx != 0 || orig != "/tmp/gradio/abc/out.bin" {
		t.Errorf("the gateway path %s does not verify back to the replica's file", p)
	}
	meta, _ := fd["meta"].(map[string]any)
	if meta["_type"] != "gradio.FileData" || fd["is_stream"] != false || fd["size"] != float64(3) || fd["orig_name"] != "out.bin" {
		t.Errorf("file output %s is not Gradio 5's FileData", out[2])
	}
	// Not FileData: a dict with a path of the app's own is left alone.
	if got := c.files(json.RawMessage(`{"path":"/etc/x","other":1}`)); string(got) != `{"path":"/etc/x","other":1}` {
		t.Errorf("a non-FileData object was rewritten: %s", got)
	}
}
