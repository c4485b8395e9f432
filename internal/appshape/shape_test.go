package appshape

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

// testConfig is a Gradio 5 config with endpoint /upper whose input is of
// type inType; the volatile fields come from the arguments.
func testConfig(t *testing.T, inType string, appID uint64, root, label string) *gradio.Config {
	t.Helper()
	raw := fmt.Sprintf(`{"version":"5.49.1","protocol":"sse_v3","api_prefix":"/gradio_api","app_id":%d,"root":%q,
		"components":[{"id":1,"type":%q,"props":{"label":%q}},{"id":2,"type":"textbox","props":{"label":"out"}},{"id":3,"type":"button","props":{}}],
		"dependencies":[{"id":0,"api_name":"upper","inputs":[1],"outputs":[2],"backend_fn":true,"types":{"generator":false}},
		{"id":1,"api_name":"count","inputs":[1],"outputs":[2],"backend_fn":true,"types":{"generator":true}}]}`, appID, root, inType, label)
	c, err := gradio.ParseConfig([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigShapeIgnoresVolatileFields(t *testing.T) {
	a := testConfig(t, "textbox", 1<<63+1, "http://10.0.0.1:7860", "text")
	b := testConfig(t, "textbox", 1<<63+99, "https://owner-space.hf.space", "another label")
	if Fingerprint(a) != Fingerprint(b) {
		t.Errorf("same app, other app_id/root/labels: fingerprints differ\n%s\n%s", Shape(a), Shape(b))
	}
	c := testConfig(t, "number", 1<<63+1, "http://10.0.0.1:7860", "text")
	if Fingerprint(a) == Fingerprint(c) {
		t.Errorf("an input of another type has the same fingerprint:\n%s", Shape(c))
	}
	if d := Diff(Shape(a), Shape(c), 4); len(d) != 4 || !strings.HasPrefix(d[0], "- fn_index 0 /upper in [textbox]") ||
		!strings.HasPrefix(d[2], "+ fn_index 0 /upper in [number]") {
		t.Errorf("diff %q", d)
	}
}

// TestConfigShapeIgnoresTheGeneration: one app served by Gradio 5.49
// (sse_v3, /gradio_api), 4.44 (sse_v3, no prefix), 4.16 (sse_v1) and 3.50
// (no protocol field: ws) has one shape; the same endpoints with another
// input type on an older generation still differ.
func TestConfigShapeIgnoresTheGeneration(t *testing.T) {
	base := testConfig(t, "textbox", 1, "http://r0", "text")
	gen := func(in, version, protocol, prefix string) *gradio.Config {
		t.Helper()
		var c map[string]any
		if err := json.Unmarshal(testConfig(t, in, 2, "http://r1", "t").Raw, &c); err != nil {
			t.Fatal(err)
		}
		c["version"] = version
		if version < "4.22" {
			// Older releases leave each event's queue to the app's
			// enable_queue (null); 4.44 and later write true.
			c["enable_queue"] = true
			for _, d := range c["dependencies"].([]any) {
				d.(map[string]any)["queue"] = nil
			}
		} else {
			for _, d := range c["dependencies"].([]any) {
				d.(map[string]any)["queue"] = true
			}
		}
		delete(c, "protocol")
		delete(c, "api_prefix")
		if protocol != "" {
			c["protocol"] = protocol
		}
		if prefix != "" {
			c["api_prefix"] = prefix
		}
		raw, _ := json.Marshal(c)
		cfg, err := gradio.ParseConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	for _, g := range []struct{ version, protocol, prefix string }{
		{"4.44.1", "sse_v3", ""}, {"4.16.0", "sse_v1", ""}, {"3.50.2", "", ""}, {"6.25.0", "sse_v3", "/gradio_api"},
	} {
		c := gen("textbox", g.version, g.protocol, g.prefix)
		if Fingerprint(c) != Fingerprint(base) {
			t.Errorf("Gradio %s (%q): the same app has another shape:\n%s\n%s", g.version, c.Protocol, Shape(base), Shape(c))
		}
		if odd := gen("number", g.version, g.protocol, g.prefix); Fingerprint(odd) == Fingerprint(base) {
			t.Errorf("Gradio %s: an input of another type has the reference's shape", g.version)
		}
	}
}
