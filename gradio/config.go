package gradio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Protocol names as they appear in config.protocol.
const (
	protocolSSEv3  = "sse_v3"   // Gradio 4.22 - 6.x
	protocolSSEv21 = "sse_v2.1" // Gradio 4.21
	protocolSSEv2  = "sse_v2"   // Gradio 4.17 - 4.20
	protocolSSEv1  = "sse_v1"   // Gradio 4.9 - 4.16
	protocolSSE    = "sse"      // Gradio 4.0 - 4.8 ("v0")
	protocolWS     = "ws"       // Gradio 3.x (config without protocol); unsupported
)

// Config is the parsed GET /config of an app: the fields an API client
// needs. Raw keeps the whole document.
type Config struct {
	Version          string // Gradio version, trimmed ("5.49.1")
	Protocol         string // sse_v3, sse_v2.1, sse_v2, sse_v1, sse or ws (also when absent)
	APIPrefix        string // "/gradio_api" (5.x+) or ""
	Root             string // the root URL the server computed (informational)
	AppID            uint64 // random per server start; 0 when absent (3.x)
	EnableQueue      bool
	MaxFileSize      int64 // bytes; 0 = no limit
	ConnectHeartbeat bool  // the app wants /heartbeat/{session} kept open
	SpaceID          string
	AuthRequired     bool
	ShowError        bool
	Components       []Component
	Dependencies     []Dependency
	Raw              json.RawMessage

	byID map[int]*Component
}

// Component is one entry of config.components.
type Component struct {
	ID      int             `json:"id"`
	Type    string          `json:"type"`
	SkipAPI bool            `json:"skip_api"`
	Props   json.RawMessage `json:"props"`
	// APIInfo is the component's JSON schema (api_info), if any.
	APIInfo json.RawMessage `json:"api_info"`
}

// Label returns props.label, or "".
func (c *Component) Label() string {
	var p struct {
		Label any `json:"label"`
	}
	if json.Unmarshal(c.Props, &p) == nil {
		if s, ok := p.Label.(string); ok {
			return s
		}
	}
	return ""
}

// IsState reports whether the component is a gr.State (or another skip_api
// component): its input is sent as null and the server fills it from the
// session.
func (c *Component) IsState() bool { return c.Type == "state" || c.SkipAPI }

// Dependency is one entry of config.dependencies: an event listener, and
// the unit an API call addresses.
type Dependency struct {
	// FnIndex is the dependency's id (its array index when the config has
	// no ids: 3.x and early 4.x). It is what queue/join calls fn_index.
	FnIndex int
	// APIName is the api_name without a leading "/", or "" when none.
	APIName string
	// Private is true when api_name is false or api_visibility is
	// "private": not callable through the API.
	Private bool
	// Undocumented is true for api_visibility "undocumented" or
	// show_api false: callable, but hidden from /info.
	Undocumented bool
	Inputs       []int
	Outputs      []int
	// BackendFn is false for front-end (JS-only) functions: never callable.
	BackendFn bool
	// Queue is config's "queue": nil (default) or an explicit bool.
	Queue      *bool
	Generator  bool   // types.generator
	Connection string // "sse" or "stream"
	// RenderedIn is the render id of the gr.render function that created
	// this dependency (nil when it is part of the app's own config), and
	// RenderID the render id this dependency itself renders (nil when it
	// is not a gr.render function). Render ids start at 0.
	RenderedIn, RenderID *int
	Raw                  json.RawMessage
}

type rawConfig struct {
	Version          string          `json:"version"`
	Protocol         string          `json:"protocol"`
	APIPrefix        string          `json:"api_prefix"`
	Root             string          `json:"root"`
	AppID            json.Number     `json:"app_id"`
	EnableQueue      *bool           `json:"enable_queue"`
	MaxFileSize      json.Number     `json:"max_file_size"`
	ConnectHeartbeat bool            `json:"connect_heartbeat"`
	SpaceID          *string         `json:"space_id"`
	AuthRequired     bool            `json:"auth_required"`
	ShowError        bool            `json:"show_error"`
	AllowFlagging    json.RawMessage `json:"allow_flagging"`
	Components       []Component     `json:"components"`
	Dependencies     []rawDependency `json:"dependencies"`
}

type rawDependency struct {
	ID            *int            `json:"id"`
	APIName       json.RawMessage `json:"api_name"`
	APIVisibility string          `json:"api_visibility"`
	ShowAPI       *bool           `json:"show_api"`
	Inputs        []int           `json:"inputs"`
	Outputs       []int           `json:"outputs"`
	BackendFn     *bool           `json:"backend_fn"`
	Queue         *bool           `json:"queue"`
	Types         struct {
		Generator bool `json:"generator"`
	} `json:"types"`
	Connection string `json:"connection"`
	RenderedIn *int   `json:"rendered_in"`
	RenderID   *int   `json:"render_id"`
}

// ParseConfig parses a /config body of any Gradio version from 3.x to 6.x.
// It fails only on malformed JSON; an unsupported protocol is reported by
// Connect, not here.
func ParseConfig(b []byte) (*Config, error) {
	var rc rawConfig
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&rc); err != nil {
		return nil, fmt.Errorf("gradio: config: %w", err)
	}
	if len(rc.AllowFlagging) > 0 && rc.Version == "" {
		return nil, fmt.Errorf("%w: Gradio 2.x config", ErrUnsupportedProtocol)
	}
	c := &Config{
		Version:          strings.TrimSpace(rc.Version),
		Protocol:         rc.Protocol,
		APIPrefix:        strings.TrimRight(rc.APIPrefix, "/"),
		Root:             rc.Root,
		EnableQueue:      rc.EnableQueue == nil || *rc.EnableQueue,
		ConnectHeartbeat: rc.ConnectHeartbeat,
		AuthRequired:     rc.AuthRequired,
		ShowError:        rc.ShowError,
		Components:       rc.Components,
		Raw:              append(json.RawMessage(nil), b...),
	}
	if rc.EnableQueue == nil && c.Protocol == "" {
		c.EnableQueue = false // 3.x: null means queue off
	}
	if c.Protocol == "" {
		c.Protocol = protocolWS
	}
	if c.APIPrefix != "" && !strings.HasPrefix(c.APIPrefix, "/") {
		c.APIPrefix = "/" + c.APIPrefix
	}
	if rc.SpaceID != nil {
		c.SpaceID = *rc.SpaceID
	}
	if rc.AppID != "" {
		id, err := strconv.ParseUint(rc.AppID.String(), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("gradio: config: app_id %s: %w", rc.AppID, err)
		}
		c.AppID = id
	}
	if rc.MaxFileSize != "" {
		n, err := strconv.ParseFloat(rc.MaxFileSize.String(), 64)
		if err != nil {
			return nil, fmt.Errorf("gradio: config: max_file_size %s: %w", rc.MaxFileSize, err)
		}
		c.MaxFileSize = int64(n)
	}
	c.byID = make(map[int]*Component, len(c.Components))
	for i := range c.Components {
		c.byID[c.Components[i].ID] = &c.Components[i]
	}
	// Keep each dependency's raw JSON too; decode the array twice rather
	// than hand-roll the split.
	var rawDeps struct {
		Dependencies []json.RawMessage `json:"dependencies"`
	}
	_ = json.Unmarshal(b, &rawDeps)
	for i, rd := range rc.Dependencies {
		dep := Dependency{
			FnIndex:    i,
			Inputs:     rd.Inputs,
			Outputs:    rd.Outputs,
			BackendFn:  rd.BackendFn == nil || *rd.BackendFn,
			Queue:      rd.Queue,
			Generator:  rd.Types.Generator,
			Connection: rd.Connection,
		}
		dep.RenderedIn, dep.RenderID = rd.RenderedIn, rd.RenderID
		if rd.ID != nil {
			dep.FnIndex = *rd.ID
		}
		if i < len(rawDeps.Dependencies) {
			dep.Raw = rawDeps.Dependencies[i]
		}
		switch n := bytes.TrimSpace(rd.APIName); {
		case len(n) == 0, string(n) == "null":
		case string(n) == "false":
			dep.Private = true
		default:
			var s string
			if err := json.Unmarshal(n, &s); err == nil {
				dep.APIName = strings.TrimPrefix(s, "/")
			}
		}
		switch rd.APIVisibility {
		case "private":
			dep.Private = true
		case "undocumented":
			dep.Undocumented = true
		}
		if rd.ShowAPI != nil && !*rd.ShowAPI {
			dep.Undocumented = true
		}
		c.Dependencies = append(c.Dependencies, dep)
	}
	return c, nil
}

// Component returns the component with the given id, or nil.
func (c *Config) Component(id int) *Component {
	if c.byID == nil {
		return nil
	}
	return c.byID[id]
}

// IsState reports whether component id is sent as null (gr.State or another
// skip_api component).
func (c *Config) IsState(id int) bool {
	comp := c.Component(id)
	return comp != nil && comp.IsState()
}

// Callable reports whether d can be called through the API (a backend
// function that is not private).
func (d *Dependency) Callable() bool { return d.BackendFn && !d.Private }

// FnIndex formats an endpoint reference by fn_index for Predict and Submit:
// Predict(ctx, gradio.FnIndex(3), ...) calls the dependency whose id is 3,
// which is the only way to call a dependency without an api_name.
func FnIndex(i int) string { return "#" + strconv.Itoa(i) }

// Endpoint finds the dependency a Predict/Submit endpoint string refers to:
// an api_name with or without a leading "/" ("upper", "/upper"), or
// FnIndex(i) ("#i"). It returns an error wrapping ErrUnknownEndpoint when
// none matches or the match is not callable (private or front-end only).
func (c *Config) Endpoint(endpoint string) (*Dependency, error) {
	if strings.HasPrefix(endpoint, "#") {
		i, err := strconv.Atoi(endpoint[1:])
		if err != nil {
			return nil, fmt.Errorf("%w: bad fn_index %q", ErrUnknownEndpoint, endpoint)
		}
		for k := range c.Dependencies {
			d := &c.Dependencies[k]
			if d.FnIndex == i {
				if !d.BackendFn {
					return nil, fmt.Errorf("%w: fn_index %d is a front-end function", ErrUnknownEndpoint, i)
				}
				if d.Private {
					return nil, fmt.Errorf("%w: fn_index %d is private", ErrUnknownEndpoint, i)
				}
				return d, nil
			}
		}
		return nil, fmt.Errorf("%w: no fn_index %d", ErrUnknownEndpoint, i)
	}
	name := strings.TrimPrefix(endpoint, "/")
	if name == "" {
		return nil, fmt.Errorf("%w: empty endpoint name", ErrUnknownEndpoint)
	}
	var found *Dependency
	for k := range c.Dependencies {
		d := &c.Dependencies[k]
		if d.APIName != name {
			continue
		}
		if d.Callable() {
			return d, nil
		}
		found = d
	}
	if found != nil {
		return nil, fmt.Errorf("%w: /%s is not callable (private or front-end only)", ErrUnknownEndpoint, name)
	}
	return nil, fmt.Errorf("%w: /%s", ErrUnknownEndpoint, name)
}

// versionAtLeast compares dotted numeric versions ("4.29.0" >= "4.29");
// pre-release suffixes are ignored.
func versionAtLeast(v, min string) bool {
	a, b := versionParts(v), versionParts(min)
	for i := 0; i < 3; i++ {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return true
}

func versionParts(v string) [3]int {
	var out [3]int
	for i, p := range strings.SplitN(v, ".", 3) {
		n := 0
		for _, r := range p {
			if r < '0' || r > '9' {
				break
			}
			n = n*10 + int(r-'0')
		}
		out[i] = n
	}
	return out
}
