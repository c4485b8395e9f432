package gradio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Kwargs passes arguments by parameter name (the /info parameter_name, or
// the label for apps that have none). As the last argument of Predict or
// Submit it may follow positional arguments:
//
//	c.Predict(ctx, "/count", gradio.Kwargs{"n": 3})
//
// Missing parameters take their /info default; a missing parameter without
// default, or an unknown name, is an *ArgumentError.
type Kwargs map[string]any

// APIInfo is the parsed GET {prefix}/info.
type APIInfo struct {
	// Named maps "/api_name" to its endpoint description.
	Named map[string]*EndpointInfo
	// Unnamed maps the fn_index (as a string) to descriptions of endpoints
	// without api_name (filled only by Gradio 3.x).
	Unnamed map[string]*EndpointInfo
	Raw     json.RawMessage
}

// EndpointInfo describes one endpoint's parameters and returns. Parameters
// exclude State inputs.
type EndpointInfo struct {
	Parameters  []ParameterInfo `json:"parameters"`
	Returns     []ParameterInfo `json:"returns"`
	Description string          `json:"description"`
	// OAuthToken is "required"/"optional" for functions taking
	// gr.OAuthToken; "" otherwise.
	OAuthToken string `json:"oauth_token"`
}

// ParameterInfo describes one parameter or return value.
type ParameterInfo struct {
	Label         string          `json:"label"`
	ParameterName string          `json:"parameter_name"`
	HasDefault    bool            `json:"parameter_has_default"`
	Default       json.RawMessage `json:"parameter_default"`
	Type          json.RawMessage `json:"type"`
	PythonType    PythonType      `json:"python_type"`
	Component     string          `json:"component"`
	ExampleInput  json.RawMessage `json:"example_input"`
	Serializer    string          `json:"serializer"` // 3.x only
}

// PythonType is the rendered Python type of a parameter.
type PythonType struct {
	Type        string `json:"type"`
	Description string `json:"description"`
}

// Name is the keyword a Kwargs key must match: parameter_name, else label.
func (p *ParameterInfo) Name() string {
	if p.ParameterName != "" {
		return p.ParameterName
	}
	return p.Label
}

// parseAPIInfo parses a /info body (Gradio 3.x-6.x, and the {"api": ...}
// wrapper of the old API fetcher).
func parseAPIInfo(b []byte) (*APIInfo, error) {
	var raw struct {
		Named   map[string]*EndpointInfo `json:"named_endpoints"`
		Unnamed map[string]*EndpointInfo `json:"unnamed_endpoints"`
		API     json.RawMessage          `json:"api"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("gradio: info: %w", err)
	}
	if raw.Named == nil && len(raw.API) > 0 {
		return parseAPIInfo(raw.API)
	}
	if raw.Named == nil {
		raw.Named = map[string]*EndpointInfo{}
	}
	if raw.Unnamed == nil {
		raw.Unnamed = map[string]*EndpointInfo{}
	}
	for k, v := range raw.Named {
		if v == nil {
			delete(raw.Named, k)
		}
	}
	return &APIInfo{Named: raw.Named, Unnamed: raw.Unnamed, Raw: append(json.RawMessage(nil), b...)}, nil
}

// Endpoint returns the description of dependency d, or nil.
func (a *APIInfo) Endpoint(d *Dependency) *EndpointInfo {
	if a == nil {
		return nil
	}
	if d.APIName != "" {
		if e := a.Named["/"+d.APIName]; e != nil {
			return e
		}
	}
	return a.Unnamed[fmt.Sprint(d.FnIndex)]
}

// buildData turns the caller's arguments into the data array of a call:
// one element per dependency input, State inputs as null. Keyword and
// default handling needs info (may be nil when the call is fully
// positional).
func buildData(cfg *Config, d *Dependency, endpoint string, info *EndpointInfo, args []any) ([]any, error) {
	var kw Kwargs
	if n := len(args); n > 0 {
		if k, ok := args[n-1].(Kwargs); ok {
			kw, args = k, args[:n-1]
		}
	}
	nparams := 0
	for _, id := range d.Inputs {
		if !cfg.IsState(id) {
			nparams++
		}
	}
	if len(args) > nparams {
		return nil, &ArgumentError{Endpoint: endpoint, Msg: fmt.Sprintf("got %d arguments, the endpoint takes %d", len(args), nparams)}
	}
	vals := make([]any, nparams)
	have := make([]bool, nparams)
	for i, a := range args {
		vals[i], have[i] = a, true
	}
	if len(args) < nparams || len(kw) > 0 {
		if info == nil {
			return nil, &ArgumentError{Endpoint: endpoint, Msg: fmt.Sprintf("got %d arguments, the endpoint takes %d (no API info for keyword arguments or defaults)", len(args), nparams)}
		}
		if len(info.Parameters) != nparams {
			return nil, &ArgumentError{Endpoint: endpoint, Msg: fmt.Sprintf("API info lists %d parameters but the config has %d inputs", len(info.Parameters), nparams)}
		}
		used := map[string]bool{}
		for i, p := range info.Parameters {
			v, ok := kw[p.Name()]
			if !ok {
				continue
			}
			if have[i] {
				return nil, &ArgumentError{Endpoint: endpoint, Msg: fmt.Sprintf("parameter %q given both by position and by name", p.Name())}
			}
			vals[i], have[i] = v, true
			used[p.Name()] = true
		}
		if len(used) != len(kw) {
			var unknown, names []string
			for k := range kw {
				if !used[k] {
					unknown = append(unknown, k)
				}
			}
			for _, p := range info.Parameters {
				names = append(names, p.Name())
			}
			sort.Strings(unknown)
			return nil, &ArgumentError{Endpoint: endpoint, Msg: fmt.Sprintf("unknown keyword argument(s) %s (parameters: %s)", strings.Join(unknown, ", "), strings.Join(names, ", "))}
		}
		for i, p := range info.Parameters {
			if have[i] {
				continue
			}
			if !p.HasDefault {
				return nil, &ArgumentError{Endpoint: endpoint, Msg: fmt.Sprintf("no value provided for required argument %q", p.Name())}
			}
			def := bytes.TrimSpace(p.Default)
			if len(def) == 0 {
				def = []byte("null")
			}
			vals[i], have[i] = json.RawMessage(def), true
		}
	}
	data := make([]any, 0, len(d.Inputs))
	k := 0
	for _, id := range d.Inputs {
		if cfg.IsState(id) {
			data = append(data, nil)
			continue
		}
		data = append(data, vals[k])
		k++
	}
	return data, nil
}
