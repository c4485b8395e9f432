package gradio

import (
	"encoding/json"
	"testing"
)

func TestMergeRenderReplacesByRenderID(t *testing.T) {
	base, err := ParseConfig([]byte(`{"version":"5.49.1","protocol":"sse_v3",
		"components":[{"id":1,"type":"textbox","props":{}}],
		"dependencies":[{"id":0,"api_name":"show","inputs":[1],"outputs":[1],"render_id":3}]}`))
	if err != nil {
		t.Fatal(err)
	}
	out := func(rc string) json.RawMessage {
		return json.RawMessage(rc)
	}
	merge := func(cfg *Config, raw json.RawMessage) *Config {
		t.Helper()
		rc, err := parseRenderConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		if rc.none {
			return cfg
		}
		return mergeRender(cfg, rc)
	}
	first := merge(base, out(`{"render_id":3,"layout":{},
		"components":[{"id":10,"type":"textbox","props":{"rendered_in":3}},{"id":11,"type":"state","props":{"rendered_in":3}}],
		"dependencies":[{"id":5,"api_name":"a","inputs":[10,11],"outputs":[10],"rendered_in":3}]}`))
	if _, err := first.Endpoint("a"); err != nil {
		t.Fatal(err)
	}
	if !first.IsState(11) || !first.ConnectHeartbeat {
		t.Error("the rendered gr.State is not known (state id, connect_heartbeat)")
	}
	second := merge(first, out(`{"render_id":3,"layout":{},
		"components":[{"id":12,"type":"textbox","props":{"rendered_in":3}}],
		"dependencies":[{"id":6,"api_name":"b","inputs":[12],"outputs":[12],"rendered_in":3}]}`))
	if _, err := second.Endpoint("a"); err == nil {
		t.Error("a re-render kept the previous run's dependency")
	}
	if second.Component(10) != nil || second.Component(12) == nil {
		t.Error("a re-render did not replace the previous run's components")
	}
	// Real 5.49.1's shape: render id 0, props without rendered_in, the
	// same component id sent again.
	other := merge(second, out(`{"render_id":0,"page":"","layout":{},"components":[{"id":12,"type":"textbox","props":{"label":"new"}}],
		"dependencies":[{"id":7,"api_name":"c","inputs":[12],"outputs":[12],"rendered_in":0}]}`))
	other = merge(other, out(`{"render_id":0,"page":"","layout":{},"components":[{"id":12,"type":"textbox","props":{"label":"newer"}}],
		"dependencies":[{"id":7,"api_name":"c","inputs":[12],"outputs":[12],"rendered_in":0}]}`))
	n := 0
	for _, c := range other.Components {
		if c.ID == 12 {
			n++
		}
	}
	if n != 1 || other.Component(12).Label() != "newer" {
		t.Errorf("component 12 is there %d times, label %q; want once, the newest", n, other.Component(12).Label())
	}
	if countDeps(other, "c") != 1 {
		t.Errorf("render id 0 re-rendered: %d c dependencies, want 1", countDeps(other, "c"))
	}
	for _, name := range []string{"show", "b", "c"} {
		if _, err := other.Endpoint(name); err != nil {
			t.Errorf("%s after a second render id: %v", name, err)
		}
	}
	if len(base.Dependencies) != 1 || base.Component(10) != nil {
		t.Error("merging changed the base config")
	}
	if merge(base, out(`null`)) != base {
		t.Error("a null render_config changed the config")
	}
	for _, bad := range []string{`{"components":[]}`, `[1]`, `{"render_id":"x"}`} {
		if _, err := parseRenderConfig(out(bad)); err == nil {
			t.Errorf("render_config %s accepted", bad)
		}
	}
}

func countDeps(c *Config, name string) int {
	n := 0
	for _, d := range c.Dependencies {
		if d.APIName == name {
			n++
		}
	}
	return n
}
