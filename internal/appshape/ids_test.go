package appshape

import (
	"encoding/json"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

// shiftedConfig is the app of testConfig numbered as real Gradio 4.44
// numbers it next to 5.49: one extra block (a form) before the output and
// the button, so their ids are one higher.
func shiftedConfig(t *testing.T) *gradio.Config {
	t.Helper()
	raw := `{"version":"4.44.1","protocol":"sse_v3","app_id":7,"root":"http://r2",
		"components":[{"id":1,"type":"textbox","props":{"label":"in"}},{"id":2,"type":"form","props":{}},{"id":3,"type":"textbox","props":{"label":"out"}},{"id":4,"type":"button","props":{}}],
		"dependencies":[{"id":0,"targets":[[4,"click"]],"api_name":"upper","inputs":[1],"outputs":[3],"backend_fn":true,"queue":true,"types":{"generator":false}},
		{"id":1,"targets":[[1,"submit"]],"api_name":"count","inputs":[1],"outputs":[3],"backend_fn":true,"queue":true,"types":{"generator":true}}]}`
	c, err := gradio.ParseConfig([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func withTargets(t *testing.T, c *gradio.Config) *gradio.Config {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(c.Raw, &m); err != nil {
		t.Fatal(err)
	}
	deps := m["dependencies"].([]any)
	deps[0].(map[string]any)["targets"] = []any{[]any{3, "click"}}
	deps[1].(map[string]any)["targets"] = []any{[]any{1, "submit"}}
	for _, d := range deps {
		d.(map[string]any)["queue"] = true
	}
	raw, _ := json.Marshal(m)
	out, err := gradio.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestComponentIDsMappedPerReplica: one app whose components another
// Gradio release numbers otherwise is one app to the shape check, and a
// join's trigger_id and a completion's changed_state_ids are mapped
// between the presented ids and the replica's.
func TestComponentIDsMappedPerReplica(t *testing.T) {
	presented := withTargets(t, testConfig(t, "textbox", 1, "http://r0", "text"))
	replica := shiftedConfig(t)
	if Fingerprint(presented) != Fingerprint(replica) {
		t.Fatalf("one app numbered otherwise has another shape:\n%q\n%q", Shape(presented), Shape(replica))
	}
	var maps IDMaps
	m := maps.Get(presented, replica)
	if len(m) != 2 || m[2] != 3 || m[3] != 4 {
		t.Fatalf("map %v, want 2->3 (output) and 3->4 (button)", m)
	}
	if again := maps.Get(presented, replica); len(again) != 2 {
		t.Errorf("cached map %v", again)
	}
	for range 2 * maxIDMaps { // reconnected replicas: new configs, a bounded cache
		maps.Get(presented, shiftedConfig(t))
	}
	if n := len(maps.m); n > maxIDMaps {
		t.Errorf("%d cached id maps, want at most %d", n, maxIDMaps)
	}
	if same := maps.Get(presented, withTargets(t, testConfig(t, "textbox", 9, "http://r9", "x"))); same != nil {
		t.Errorf("same ids mapped: %v", same)
	}

	body := map[string]json.RawMessage{"trigger_id": json.RawMessage("3"), "fn_index": json.RawMessage("0")}
	MapTriggerID(body, m)
	if string(body["trigger_id"]) != "4" {
		t.Errorf("trigger_id %s, want 4", body["trigger_id"])
	}
	body = map[string]json.RawMessage{"trigger_id": json.RawMessage("null")}
	MapTriggerID(body, m)
	if string(body["trigger_id"]) != "null" {
		t.Errorf("null trigger_id became %s", body["trigger_id"])
	}

	msg := []byte(`{"msg":"process_completed","event_id":"e","output":{"data":["X"],"changed_state_ids":[3,1]},"success":true}`)
	got := MapChangedStateIDs(msg, Inverse(m))
	var out struct {
		Output struct {
			Data            []string `json:"data"`
			ChangedStateIDs []int    `json:"changed_state_ids"`
		} `json:"output"`
	}
	if err := json.Unmarshal(got, &out); err != nil || len(out.Output.ChangedStateIDs) != 2 || out.Output.ChangedStateIDs[0] != 2 || out.Output.ChangedStateIDs[1] != 1 || out.Output.Data[0] != "X" {
		t.Errorf("mapped %s", got)
	}
	plain := []byte(`{"msg":"process_completed","output":{"data":["X"],"changed_state_ids":[]}}`)
	if string(MapChangedStateIDs(plain, Inverse(m))) != string(plain) {
		t.Error("a message with nothing to map was rewritten")
	}
}

// TestComponentIDMismatchStillRefused: numbering aside, an endpoint whose
// inputs differ in type or number is another app.
func TestComponentIDMismatchStillRefused(t *testing.T) {
	a := testConfig(t, "textbox", 1, "http://r0", "text")
	b := testConfig(t, "number", 1, "http://r0", "text")
	if Fingerprint(a) == Fingerprint(b) {
		t.Error("another input type, same shape")
	}
}
