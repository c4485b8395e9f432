package gradio

import "testing"

// TestParseOutputShapes: what a job reads from an output object, decoded
// in the message's own pass (outputField): data absent (the synthetic {}
// after /cancel) against data null (an empty result), an error key even
// when null, a title of the wrong type ignored, the render_config kept,
// and a malformed output an error of the message, not of its stream.
func TestParseOutputShapes(t *testing.T) {
	for _, tc := range []struct {
		name, msg         string
		wantErr           bool
		dataNil, hasError bool
		nData             int
		title             string
		render            bool
	}{
		{name: "no data key", msg: `{"msg":"process_completed","output":{}}`, dataNil: true},
		{name: "null data", msg: `{"msg":"process_completed","output":{"data":null}}`},
		{name: "two outputs", msg: `{"msg":"process_completed","output":{"data":["a",{"b":1}]}}`, nData: 2},
		{name: "null error", msg: `{"msg":"process_completed","output":{"error":null}}`, dataNil: true, hasError: true},
		{name: "title of the wrong type", msg: `{"msg":"process_completed","output":{"data":[],"title":5}}`},
		{name: "title", msg: `{"msg":"process_completed","output":{"error":"x","title":"T"}}`, dataNil: true, hasError: true, title: "T"},
		{name: "render_config", msg: `{"msg":"process_completed","output":{"data":[],"render_config":{"render_id":1}}}`, render: true},
		{name: "not an object", msg: `{"msg":"process_completed","output":[1]}`, wantErr: true},
		{name: "data not a list", msg: `{"msg":"process_completed","output":{"data":"x"}}`, wantErr: true},
		{name: "no output", msg: `{"msg":"estimation"}`, dataNil: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := decodeMessage([]byte(tc.msg))
			if err != nil {
				t.Fatalf("the message itself failed: %v", err)
			}
			out, err := m.Output.parsed()
			if tc.wantErr {
				if err == nil {
					t.Fatalf("no error for %s", tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (out.Data == nil) != tc.dataNil || len(out.Data) != tc.nData {
				t.Errorf("data = %v (nil %v), want nil %v and %d outputs", out.Data, out.Data == nil, tc.dataNil, tc.nData)
			}
			if out.isError() != tc.hasError {
				t.Errorf("isError = %v, want %v", out.isError(), tc.hasError)
			}
			if got := ""; out.Title != nil {
				got = *out.Title
				if got != tc.title {
					t.Errorf("title %q, want %q", got, tc.title)
				}
			} else if tc.title != "" {
				t.Errorf("no title, want %q", tc.title)
			}
			if (len(out.RenderConfig) > 0) != tc.render {
				t.Errorf("render_config %s, want kept %v", out.RenderConfig, tc.render)
			}
		})
	}
}

// TestLoadEventShapes: how LoadEvent classifies the relayed messages it
// reads without decoding their outputs' data.
func TestLoadEventShapes(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		ok   bool
		kind EventKind
	}{
		{`{"msg":"estimation","rank":2,"queue_size":3,"rank_eta":1.5}`, true, EventQueued},
		{`{"msg":"process_starts","eta":2}`, true, EventStarted},
		{`{"msg":"process_completed","output":{"data":["a"]},"success":true}`, true, EventCompleted},
		{`{"msg":"process_completed","output":{}}`, true, EventCompleted},
		{`{"msg":"process_completed","output":{"data":null}}`, true, EventCompleted},
		{`{"msg":"process_completed","output":null,"success":true}`, true, EventCompleted},
		{`{"msg":"process_completed","output":{"data":["a"]},"success":false}`, true, EventError},
		{`{"msg":"process_completed","output":{"error":null}}`, true, EventError},
		{`{"msg":"process_completed","output":{"error":"boom","data":[]}}`, true, EventError},
		{`{"msg":"process_completed","output":[1]}`, true, EventError},
		{`{"msg":"process_completed","output":{"data":"x"}}`, true, EventError},
		{`{"msg":"heartbeat"}`, false, 0},
		{`"ALIVE"`, false, 0},
		{`not json`, false, 0},
	} {
		ev, ok := LoadEvent([]byte(tc.msg))
		if ok != tc.ok || (ok && ev.Kind != tc.kind) {
			t.Errorf("LoadEvent(%s) = %v %v, want %v %v", tc.msg, ev.Kind, ok, tc.kind, tc.ok)
		}
	}
	if ev, _ := LoadEvent([]byte(`{"msg":"estimation","rank":2,"queue_size":3,"rank_eta":1.5}`)); ev.Rank != 2 || ev.QueueSize != 3 || ev.ETA <= 0 {
		t.Errorf("estimation read as %+v", ev)
	}
}
