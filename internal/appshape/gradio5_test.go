package appshape

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

// TestAsGradio5: a real Gradio 4.20.1 config (sse_v2, no dependency ids,
// no pages, one gr.State) presented as Gradio 5's parses as an sse_v3 app
// with the same endpoints, numbered dependencies, the heartbeat its
// gr.State asks for, one page, and the presented root and app_id.
func TestAsGradio5(t *testing.T) {
	raw, err := os.ReadFile("testdata/gradio-4.20.1_config.json")
	if err != nil {
		t.Fatal(err)
	}
	in, err := gradio.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := AsGradio5(in, Presented{Version: "5.49.1", APIPrefix: "/gradio_api", Root: "http://gw.test", AppID: 42})
	if err != nil {
		t.Fatal(err)
	}
	got, err := gradio.ParseConfig(out)
	if err != nil {
		t.Fatalf("the presented config does not parse: %v", err)
	}
	if got.Protocol != "sse_v3" || got.APIPrefix != "/gradio_api" || got.Version != "5.49.1" || !got.ConnectHeartbeat {
		t.Errorf("presented protocol %q prefix %q version %q heartbeat %v", got.Protocol, got.APIPrefix, got.Version, got.ConnectHeartbeat)
	}
	if Fingerprint(got) != Fingerprint(in) {
		t.Error("the presented app's shape differs from the replica's")
	}
	var m struct {
		Root  string `json:"root"`
		AppID uint64 `json:"app_id"`
		Path  *string
		Deps  []struct {
			ID         *int   `json:"id"`
			Connection string `json:"connection"`
		} `json:"dependencies"`
		Page map[string]struct {
			Dependencies []int `json:"dependencies"`
		} `json:"page"`
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if m.Root != "http://gw.test" || m.AppID != 42 || m.Path != nil {
		t.Errorf("root %q app_id %d path %v", m.Root, m.AppID, m.Path)
	}
	for i, d := range m.Deps {
		if d.ID == nil || *d.ID != i || d.Connection != "sse" {
			t.Errorf("dependency %d: id %v connection %q", i, d.ID, d.Connection)
		}
	}
	if n := len(m.Page[""].Dependencies); n != len(in.Dependencies) {
		t.Errorf("the page lists %d dependencies, want %d", n, len(in.Dependencies))
	}
	if _, err := AsGradio5(&gradio.Config{Raw: []byte(`[]`)}, Presented{}); err == nil {
		t.Error("a config that is not an object was presented")
	}
}

// TestAsGradio5HeartbeatOnUnload: an app without gr.State but with an
// unload event gets Gradio 5's heartbeat too; one with neither does not.
func TestAsGradio5HeartbeatOnUnload(t *testing.T) {
	for _, tc := range []struct {
		target string
		want   bool
	}{{"unload", true}, {"click", false}} {
		raw := []byte(`{"version":"4.20.1","protocol":"sse_v2","components":[{"id":1,"type":"button","props":{}}],"dependencies":[{"targets":[[1,"` + tc.target + `"]],"inputs":[],"outputs":[],"backend_fn":true,"queue":null}],"layout":{"id":0,"children":[{"id":1}]}}`)
		in, err := gradio.ParseConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		out, err := AsGradio5(in, Presented{Version: "5.49.1", APIPrefix: "/gradio_api"})
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Heartbeat bool `json:"connect_heartbeat"`
		}
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		if m.Heartbeat != tc.want {
			t.Errorf("%s: connect_heartbeat %v, want %v", tc.target, m.Heartbeat, tc.want)
		}
	}
}
