package appshape

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/gradiopool/gradiopool/gradio"
)

// PresentInfo presents the reference replica's /info body in Gradio 5's
// shape. Gradio 4.21 and later publish each parameter's Python name and
// default (parameter_name, parameter_has_default, parameter_default), from
// which the official clients build keyword arguments; their /info passes
// unchanged. Earlier releases publish neither: each parameter is named
// after its label made an identifier (unique per endpoint), and takes as
// its default the initial value its component has in the app's config when
// that value is not empty (null, "", [], {}), which is what Gradio 4.21+
// reports for the reference app's parameters (a Number with value=5 has
// the default 5; a Textbox or File without a value has none). The Python
// names themselves cannot be known: where they differ from the labels,
// callers use the labels' names. A Gradio 3 (ws) /info also gets Gradio
// 5's file types (wsEndpoint). A body that is not an /info is returned as
// it is.
func PresentInfo(body []byte, cfg *gradio.Config) []byte {
	ws := cfg != nil && cfg.Protocol == ProtocolWS
	if !ws && bytes.Contains(body, []byte(`"parameter_name"`)) {
		return body
	}
	x, ok := decodeJSON(body)
	info, _ := x.(map[string]any)
	if !ok || info == nil {
		return body
	}
	for _, key := range []string{"named_endpoints", "unnamed_endpoints"} {
		eps, _ := info[key].(map[string]any)
		for name, ep := range eps {
			e, ok := ep.(map[string]any)
			if !ok {
				continue
			}
			nameParameters(e, apiInputs(cfg, key, name))
			if ws {
				wsEndpoint(e)
			}
		}
	}
	return encodeInfo(body, info)
}

// nameParameters gives endpoint e's parameters that have no
// parameter_name one, with the default of inputs (the components /info
// lists for it, in order; nil when unknown).
func nameParameters(e map[string]any, inputs []*gradio.Component) {
	params, _ := e["parameters"].([]any)
	if len(inputs) != len(params) {
		inputs = nil // not the endpoint's components: no defaults
	}
	seen := map[string]bool{}
	for i, p := range params {
		pm, ok := p.(map[string]any)
		if !ok {
			continue
		}
		if _, has := pm["parameter_name"]; has {
			continue
		}
		label, _ := pm["label"].(string)
		name := identifier(label, i)
		for seen[name] {
			name += "_" + strconv.Itoa(i)
		}
		seen[name] = true
		pm["parameter_name"] = name
		pm["parameter_has_default"] = false
		pm["parameter_default"] = nil
		if inputs != nil {
			if v, ok := initialValue(inputs[i]); ok {
				pm["parameter_has_default"] = true
				pm["parameter_default"] = v
			}
		}
	}
}

// apiInputs returns the input components /info lists for its endpoint
// name under key (State and other skip_api inputs are not listed), or nil
// when the config has no such dependency.
func apiInputs(cfg *gradio.Config, key, name string) []*gradio.Component {
	if cfg == nil {
		return nil
	}
	var dep *gradio.Dependency
	for i := range cfg.Dependencies {
		d := &cfg.Dependencies[i]
		if (key == "named_endpoints" && d.APIName != "" && "/"+d.APIName == name) ||
			(key == "unnamed_endpoints" && strconv.Itoa(d.FnIndex) == name) {
			dep = d
			break
		}
	}
	if dep == nil {
		return nil
	}
	var out []*gradio.Component
	for _, id := range dep.Inputs {
		c := cfg.Component(id)
		if c == nil {
			return nil
		}
		if !c.IsState() {
			out = append(out, c)
		}
	}
	return out
}

// initialValue returns c's value in the config when it is not empty.
func initialValue(c *gradio.Component) (any, bool) {
	var p struct {
		Value json.RawMessage `json:"value"`
	}
	if json.Unmarshal(c.Props, &p) != nil {
		return nil, false
	}
	switch strings.TrimSpace(string(p.Value)) {
	case "", "null", `""`, "[]", "{}":
		return nil, false
	}
	v, ok := decodeJSON(p.Value)
	return v, ok
}

// encodeInfo writes info, decoded from body, keeping body's order of keys
// and endpoints: clients list the endpoints in /info's order (the app's),
// and encoding the maps would sort them.
func encodeInfo(body []byte, info map[string]any) []byte {
	var buf bytes.Buffer
	buf.WriteByte('{')
	first := true
	for _, k := range objectKeys(body) {
		v, ok := info[k]
		if !ok {
			continue
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		buf.Write(Marshal(k))
		buf.WriteByte(':')
		eps, isMap := v.(map[string]any)
		if !isMap || (k != "named_endpoints" && k != "unnamed_endpoints") {
			buf.Write(Marshal(v))
			continue
		}
		var raw map[string]json.RawMessage
		_ = json.Unmarshal(body, &raw)
		buf.WriteByte('{')
		n := 0
		for _, name := range objectKeys(raw[k]) {
			e, ok := eps[name]
			if !ok {
				continue
			}
			if n > 0 {
				buf.WriteByte(',')
			}
			n++
			buf.Write(Marshal(name))
			buf.WriteByte(':')
			buf.Write(Marshal(e))
		}
		buf.WriteByte('}')
	}
	buf.WriteByte('}')
	return buf.Bytes()
}
