package appshape

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

// wsConfig is a Gradio 3 config with no components: PresentInfo knows
// the protocol, not the defaults.
var wsConfig = &gradio.Config{Protocol: ProtocolWS}

// recorded reads a recorded config and /info of a real server (testdata).
func recorded(t *testing.T, release string) (*gradio.Config, []byte) {
	t.Helper()
	cb, err := os.ReadFile("testdata/gradio-" + release + "_config.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := gradio.ParseConfig(cb)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := os.ReadFile("testdata/gradio-" + release + "_info.json")
	if err != nil {
		t.Fatal(err)
	}
	return cfg, ib
}

// checkAppOrder fails t unless out is JSON listing the reference app's
// endpoints in the app's order.
func checkAppOrder(t *testing.T, out []byte) {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	order := []string{"/upper", "/count", "/slow", "/counter", "/fail", "/reverse_file"}
	if got := objectKeys(raw["named_endpoints"]); !slices.Equal(got, order) {
		t.Errorf("endpoint order %v, want the app's %v", got, order)
	}
}

// TestWSInfoIsGradio5Shaped: a real Gradio 3.50.2 /info is presented in
// Gradio 5's shape: endpoints in the app's order, every parameter with a
// parameter_name (from its label) and a default where its component has a
// value (the Numbers of /count and /slow), file components as FileData
// with python_type filepath, no serializers.
func TestWSInfoIsGradio5Shaped(t *testing.T) {
	cfg, body := recorded(t, "3.50.2")
	out := PresentInfo(body, cfg)
	if got, want := objectKeys(out), []string{"named_endpoints", "unnamed_endpoints"}; !slices.Equal(got, want) {
		t.Fatalf("top-level keys %v, want %v", got, want)
	}
	checkAppOrder(t, out)
	type value struct {
		Label        string                `json:"label"`
		Name         *string               `json:"parameter_name"`
		HasDefault   *bool                 `json:"parameter_has_default"`
		Type         json.RawMessage       `json:"type"`
		PythonType   struct{ Type string } `json:"python_type"`
		Serializer   *string               `json:"serializer"`
		ExampleInput json.RawMessage       `json:"example_input"`
	}
	var info struct {
		Named map[string]struct {
			Parameters []value `json:"parameters"`
			Returns    []value `json:"returns"`
			ShowAPI    *bool   `json:"show_api"`
		} `json:"named_endpoints"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	for name, ep := range info.Named {
		if ep.ShowAPI == nil || !*ep.ShowAPI {
			t.Errorf("%s: show_api missing", name)
		}
		for _, v := range append(slices.Clone(ep.Parameters), ep.Returns...) {
			if v.Serializer != nil {
				t.Errorf("%s %q: Gradio 3's serializer is left", name, v.Label)
			}
		}
		for _, p := range ep.Parameters {
			wantDefault := name == "/count" || name == "/slow"
			if p.Name == nil || *p.Name == "" || p.HasDefault == nil || *p.HasDefault != wantDefault {
				t.Errorf("%s %q: parameter_name %v, parameter_has_default %v, want %v", name, p.Label, p.Name, p.HasDefault, wantDefault)
			}
		}
	}
	if n := *info.Named["/upper"].Parameters[0].Name; n != "text" {
		t.Errorf("/upper's parameter is named %q, want its label text", n)
	}
	rf := info.Named["/reverse_file"]
	p, r := rf.Parameters[0], rf.Returns[0]
	if *p.Name != "param_0" {
		t.Errorf("the label \"in\" (a Python keyword) became %q, want param_0", *p.Name)
	}
	for _, v := range []value{p, r} {
		var ty struct{ Title string }
		_ = json.Unmarshal(v.Type, &ty)
		if ty.Title != "FileData" || v.PythonType.Type != "filepath" {
			t.Errorf("/reverse_file %q: type %s, python_type %q; want FileData, filepath", v.Label, v.Type, v.PythonType.Type)
		}
	}
	var ex struct {
		Path string
		Meta struct {
			Type string `json:"_type"`
		}
	}
	if json.Unmarshal(p.ExampleInput, &ex) != nil || ex.Path == "" || ex.Meta.Type != "gradio.FileData" {
		t.Errorf("/reverse_file example_input %s, want FileData", p.ExampleInput)
	}
}

// TestWSInfoBadBodies: what is not Gradio 3's /info passes unchanged.
func TestWSInfoBadBodies(t *testing.T) {
	for _, b := range []string{``, `not json`, `[1,2]`, `null`, `{"named_endpoints":[1]}`, `{"named_endpoints":{"/x":5}}`} {
		got := PresentInfo([]byte(b), wsConfig)
		if b == `{"named_endpoints":[1]}` || b == `{"named_endpoints":{"/x":5}}` {
			var v any
			if json.Unmarshal(got, &v) != nil {
				t.Errorf("%s became invalid JSON %s", b, got)
			}
			continue
		}
		if string(got) != b {
			t.Errorf("%q became %q", b, got)
		}
	}
}

// TestIdentifier: labels become unique Python-like names.
func TestIdentifier(t *testing.T) {
	for label, want := range map[string]string{"text": "text", "Input Text": "input_text", " n ": "n", "": "param_3",
		"2nd": "param_3", "in": "param_3", "Größe!": "gr_e", "a--b": "a_b", "✓": "param_3"} {
		if got := identifier(label, 3); got != want {
			t.Errorf("identifier(%q) = %q, want %q", label, got, want)
		}
	}
	body := []byte(`{"named_endpoints":{"/x":{"parameters":[{"label":"a"},{"label":"a"},{"label":"A"}],"returns":[]}},"unnamed_endpoints":{}}`)
	var info struct {
		Named map[string]struct {
			Parameters []struct {
				Name string `json:"parameter_name"`
			} `json:"parameters"`
		} `json:"named_endpoints"`
	}
	if err := json.Unmarshal(PresentInfo(body, wsConfig), &info); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range info.Named["/x"].Parameters {
		if seen[p.Name] {
			t.Errorf("parameter_name %q twice", p.Name)
		}
		seen[p.Name] = true
	}
}

// TestWSArgs: FileData of the caller (localized to a replica path) is sent
// as the Gradio 3 file dict the real 3.50.2 server took in the recorded
// traffic (gradio/testdata/transcripts/gradio-3.50.2_reverse-file_ws.json);
// a URL is refused with a clear error; other data passes unchanged.
func TestWSArgs(t *testing.T) {
	in := `[{"path":"/tmp/gradio/7d7e/payload.txt","url":null,"orig_name":"payload.txt","size":23,"meta":{"_type":"gradio.FileData"}},"text",[{"path":"/tmp/b.txt","meta":{"_type":"gradio.FileData"}}]]`
	out, err := WSArgs(json.RawMessage(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"data":null,"is_file":true,"name":"/tmp/gradio/7d7e/payload.txt","orig_name":"payload.txt","size":23},"text",[{"data":null,"is_file":true,"name":"/tmp/b.txt"}]]`
	if string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	for _, plain := range []string{`["a",1,null]`, `[{"path":"x"}]`, `not json "path"`} {
		out, err := WSArgs(json.RawMessage(plain))
		if err != nil || string(out) != plain {
			t.Errorf("%s became %s, %v", plain, out, err)
		}
	}
	_, err = WSArgs(json.RawMessage(`[{"path":"https://example.com/a.pdf","meta":{"_type":"gradio.FileData"}}]`))
	if !errors.Is(err, ErrFileURL) {
		t.Errorf("a URL file argument: %v, want ErrFileURL", err)
	}
}

// TestWSOutputFiles: the file dict of the recorded 3.50.2 reverse_file
// answer becomes FileData with its path; other values pass unchanged.
func TestWSOutputFiles(t *testing.T) {
	in := `{"orig_name": "reversed_payload.txt", "name": "/tmp/gradio/cd8d/reversed_payload.txt", "size": 23, "data": null, "is_file": true}`
	var fd struct {
		Path     string
		URL      *string
		OrigName string `json:"orig_name"`
		Size     int
		Meta     struct {
			Type string `json:"_type"`
		}
	}
	out := WSOutputFiles(json.RawMessage(in))
	if err := json.Unmarshal(out, &fd); err != nil {
		t.Fatal(err)
	}
	if fd.Path != "/tmp/gradio/cd8d/reversed_payload.txt" || fd.OrigName != "reversed_payload.txt" || fd.Size != 23 || fd.Meta.Type != "gradio.FileData" {
		t.Errorf("got %s", out)
	}
	nested := WSOutputFiles(json.RawMessage(`[["a", {"name":"/x/y.txt","is_file":true}]]`))
	if !json.Valid(nested) || !isFileDataJSON(t, nested) {
		t.Errorf("nested: %s", nested)
	}
	for _, plain := range []string{`"is_file"`, `{"name":"rel.txt","is_file":true}`, `{"name":"/x","is_file":false}`, `{"is_file": broken`} {
		if got := WSOutputFiles(json.RawMessage(plain)); string(got) != plain {
			t.Errorf("%s became %s", plain, got)
		}
	}
}

func isFileDataJSON(t *testing.T, b []byte) bool {
	t.Helper()
	var v [][]json.RawMessage
	if json.Unmarshal(b, &v) != nil || len(v) != 1 || len(v[0]) != 2 {
		return false
	}
	var fd map[string]any
	if json.Unmarshal(v[0][1], &fd) != nil {
		return false
	}
	return fd["path"] == "/x/y.txt" && IsFileData(fd)
}

// TestInfoNamesBefore421: a real Gradio 4.20.1 /info (no parameter_name,
// no defaults) is presented with names from the labels and the defaults of
// the components that have a value, as Gradio 4.21+ reports them for the
// same app (recorded from 5.49.1: n=5, seconds=3, none for the others), in
// the app's order; an /info that has parameter names passes byte for
// byte.
func TestInfoNamesBefore421(t *testing.T) {
	cfg, body := recorded(t, "4.20.1")
	out := PresentInfo(body, cfg)
	checkAppOrder(t, out)
	var info struct {
		Named map[string]struct {
			Parameters []struct {
				Name       string          `json:"parameter_name"`
				HasDefault bool            `json:"parameter_has_default"`
				Default    json.RawMessage `json:"parameter_default"`
			} `json:"parameters"`
		} `json:"named_endpoints"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"/upper": "text=", "/count": "n=5", "/slow": "seconds=3", "/counter": "item=",
		"/fail": "text=", "/reverse_file": "param_0="}
	for ep, w := range want {
		ps := info.Named[ep].Parameters
		if len(ps) != 1 {
			t.Errorf("%s: %d parameters, want 1", ep, len(ps))
			continue
		}
		got := ps[0].Name + "="
		if ps[0].HasDefault {
			got += string(ps[0].Default)
		} else if string(ps[0].Default) != "null" {
			t.Errorf("%s: parameter_default %s without parameter_has_default", ep, ps[0].Default)
		}
		if got != w {
			t.Errorf("%s: %s, want %s", ep, got, w)
		}
	}
	named := []byte(`{"named_endpoints":{"/b":{"parameters":[{"label":"x","parameter_name":"y"}]},"/a":{}},"unnamed_endpoints":{}}`)
	if got := PresentInfo(named, cfg); !bytes.Equal(got, named) {
		t.Errorf("an /info with parameter names became %s", got)
	}
}
