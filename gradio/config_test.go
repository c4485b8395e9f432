package gradio_test

import (
	"errors"
	"os"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/fixtures/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseConfigFixtures(t *testing.T) {
	tests := []struct {
		name     string
		body     func(t testing.TB) []byte
		version  string
		protocol string
		prefix   string
		appID    uint64
		deps     int
		endpoint string // a callable endpoint
		fnIndex  int
	}{
		{"3.40.1", func(t testing.TB) []byte {
			return readFixture(t, "config_gradio-3.40.1_xray_no-protocol-field_ws.json")
		}, "3.40.1", "ws", "", 0, 0, "#0", 0},
		{"4.0.0b15", func(t testing.TB) []byte { return readFixture(t, "config_gradio-4.0.0b15_xray_protocol-sse.json") }, "4.0.0-beta.15", "sse", "", 12713514255097080317, 0, "xray_model", 0},
		{"4.27.0", func(t testing.TB) []byte { return readFixture(t, "config_gradio-4.27.0-jsmock_protocol-sse_v3.json") }, "4.27.0", "sse_v3", "", 123, 0, "/predict", 0},
		{"5.49.1", fullConfig, "5.49.1", "sse_v3", "/gradio_api", 10130621209792454406, 6, "counter", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := gradio.ParseConfig(tt.body(t))
			if err != nil {
				t.Fatal(err)
			}
			if c.Version != tt.version || c.Protocol != tt.protocol || c.APIPrefix != tt.prefix || c.AppID != tt.appID {
				t.Errorf("got version %q protocol %q prefix %q app_id %d", c.Version, c.Protocol, c.APIPrefix, c.AppID)
			}
			if tt.deps != 0 && len(c.Dependencies) != tt.deps {
				t.Errorf("%d dependencies", len(c.Dependencies))
			}
			for i, d := range c.Dependencies {
				if tt.name != "5.49.1" && tt.name != "4.27.0" && d.FnIndex != i {
					t.Errorf("dependency %d has fn_index %d (no ids: want the index)", i, d.FnIndex)
				}
			}
			d, err := c.Endpoint(tt.endpoint)
			if err != nil {
				t.Fatalf("Endpoint(%q): %v", tt.endpoint, err)
			}
			if d.FnIndex != tt.fnIndex {
				t.Errorf("fn_index %d", d.FnIndex)
			}
		})
	}
	c, _ := gradio.ParseConfig(fullConfig(t))
	d, _ := c.Endpoint("counter")
	if !c.IsState(d.Inputs[1]) || c.IsState(d.Inputs[0]) || !d.BackendFn || d.Generator {
		t.Errorf("counter: %+v", d)
	}
	if d, _ := c.Endpoint("count"); !d.Generator {
		t.Error("count is not a generator")
	}
	if c.MaxFileSize != 0 || !c.ConnectHeartbeat || !c.EnableQueue {
		t.Errorf("config fields %+v", c)
	}
}

func TestEndpointVisibility(t *testing.T) {
	cfg := []byte(`{"version":"6.0.0","protocol":"sse_v3","api_prefix":"/gradio_api","app_id":1,
	"components":[{"id":1,"type":"textbox"},{"id":2,"type":"state","skip_api":true}],
	"dependencies":[
	 {"id":10,"api_name":"pub","inputs":[1,2],"outputs":[1],"backend_fn":true,"api_visibility":"public"},
	 {"id":11,"api_name":"undoc","inputs":[1],"outputs":[1],"backend_fn":true,"api_visibility":"undocumented"},
	 {"id":12,"api_name":"priv","inputs":[1],"outputs":[1],"backend_fn":true,"api_visibility":"private"},
	 {"id":13,"api_name":false,"inputs":[1],"outputs":[1],"backend_fn":true},
	 {"id":14,"api_name":"js","inputs":[1],"outputs":[1],"backend_fn":false},
	 {"id":15,"api_name":null,"inputs":[1],"outputs":[1],"backend_fn":true,"show_api":false}]}`)
	c, err := gradio.ParseConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for ep, want := range map[string]error{
		"pub": nil, "/undoc": nil, "priv": gradio.ErrUnknownEndpoint, "#13": gradio.ErrUnknownEndpoint,
		"js": gradio.ErrUnknownEndpoint, "#14": gradio.ErrUnknownEndpoint, "#15": nil, "#10": nil, "nope": gradio.ErrUnknownEndpoint,
	} {
		d, err := c.Endpoint(ep)
		if !errors.Is(err, want) || (want == nil && d == nil) {
			t.Errorf("Endpoint(%q) = %v, %v; want %v", ep, d, err, want)
		}
	}
	if d, _ := c.Endpoint("undoc"); !d.Undocumented {
		t.Error("undocumented not marked")
	}
	if d, _ := c.Endpoint("#15"); !d.Undocumented {
		t.Error("show_api false not marked")
	}
}

func TestParseAPIInfoFixtures(t *testing.T) {
	for _, name := range []string{"info_gradio-6.x_calculator_python-client-view.json", "info_jsmock_raw-info-response.json"} {
		info, err := gradio.ParseAPIInfo(readFixture(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(info.Named) == 0 {
			t.Errorf("%s: no named endpoints", name)
		}
		for k, e := range info.Named {
			for _, p := range e.Parameters {
				if p.Name() == "" {
					t.Errorf("%s %s: parameter without name %+v", name, k, p)
				}
			}
		}
	}
	wrapped := []byte(`{"api":{"named_endpoints":{"/x":{"parameters":[],"returns":[]}}}}`)
	if info, err := gradio.ParseAPIInfo(wrapped); err != nil || info.Named["/x"] == nil {
		t.Errorf("wrapped info: %v", err)
	}
}

func TestFileDataHelpers(t *testing.T) {
	for raw, want := range map[string]bool{
		`{"path":"/tmp/a","meta":{"_type":"gradio.FileData"}}`: true,
		`{"path":"/tmp/a","url":"http://x/file=/tmp/a"}`:       true,
		`{"path":"/tmp/a","meta":{"_type":"other"}}`:           false,
		`{"name":"/tmp/a"}`: false, `"x"`: false, `null`: false,
	} {
		if got := gradio.IsFileData([]byte(raw)); got != want {
			t.Errorf("IsFileData(%s) = %v", raw, got)
		}
	}
	if _, err := gradio.ParseFileData([]byte(`{"x":1}`)); err == nil {
		t.Error("ParseFileData accepted a non-file")
	}
}
