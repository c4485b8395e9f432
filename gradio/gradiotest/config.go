package gradiotest

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// fileDataSchema is the FileData JSON schema of Gradio 5's File component.
const fileDataDescription = "The FileData class is a subclass of the GradioModel class that represents a file object within a Gradio interface. It is used to store file data and metadata when a file is uploaded.\n\nAttributes:\n    path: The server file path where the file is stored.\n    url: The normalized server URL pointing to the file.\n    size: The size of the file in bytes.\n    orig_name: The original filename before upload.\n    mime_type: The MIME type of the file.\n    is_stream: Indicates whether the file is a stream.\n    meta: Additional metadata used internally (should not be changed)."

func fileDataSchema() obj {
	anyOf := func(t string) obj {
		return obj{{"anyOf", []obj{{{"type", t}}, {{"type", "null"}}}}}
	}
	with := func(o obj, title string) obj { return o.set("default", nil).set("title", title) }
	return obj{
		{"$defs", obj{{"FileDataMeta", obj{{"properties", obj{{"_type", obj{{"const", "gradio.FileData"}, {"title", "Type"}, {"type", "string"}}}}},
			{"required", []string{"_type"}}, {"title", "FileDataMeta"}, {"type", "object"}}}}},
		{"properties", obj{
			{"path", obj{{"title", "Path"}, {"type", "string"}}},
			{"url", with(anyOf("string"), "Url")},
			{"size", with(anyOf("integer"), "Size")},
			{"orig_name", with(anyOf("string"), "Orig Name")},
			{"mime_type", with(anyOf("string"), "Mime Type")},
			{"is_stream", obj{{"default", false}, {"title", "Is Stream"}, {"type", "boolean"}}},
			{"meta", obj{{"$ref", "#/$defs/FileDataMeta"}}},
		}},
		{"required", []string{"path"}}, {"title", "FileData"}, {"type", "object"},
		{"additional_description", fileDataDescription},
	}
}

var fileExample = obj{{"path", "https://github.com/gradio-app/gradio/raw/main/test/test_files/sample_file.pdf"},
	{"meta", obj{{"_type", "gradio.FileData"}}}, {"orig_name", "sample_file.pdf"},
	{"url", "https://github.com/gradio-app/gradio/raw/main/test/test_files/sample_file.pdf"}}

// componentKind describes how a component type appears in config and info.
type componentKind struct {
	class      string // Python class name (info "component")
	classID    string
	apiInfo    func() any
	pyType     string
	pyTypeDesc string
	example    any
}

var kinds = map[string]componentKind{
	"textbox": {"Textbox", "ba0f75487c6ad73d03c9e0acacf59015da068feaa20b507f30dde8814bd99df2", func() any { return obj{{"type", "string"}} }, "str", "", "Hello!!"},
	"number":  {"Number", "48f7707e8a33bfd6a68d89808443abe2af5aad1902fda257eb472e985f65290f", func() any { return obj{{"type", "number"}} }, "float", "", 3},
	"file":    {"File", "c990cb6eb88d54ba1a1d05fd48dea243f5c43c910cea17fbcdf20a2625432d2d", func() any { return fileDataSchema() }, "filepath", fileDataDescription, fileExample},
	"json":    {"JSON", "8d3fb8e5d6bc4e0b1e0a4f5f0c1b2a3d4e5f60718293a4b5c6d7e8f9a0b1c2d3", func() any { return obj{} }, "Dict[Any, Any]", "", nil},
}

func kindOf(t string) componentKind {
	if k, ok := kinds[t]; ok {
		return k
	}
	k := kinds["json"]
	k.class = strings.ToUpper(t[:1]) + t[1:]
	return k
}

// buildComponents assigns component ids like a Blocks app with one tab per
// endpoint (tabitem, inputs, outputs, button, form) and prepares the config.
func (s *Server) buildComponents() {
	s.compIDs = make([][2][]int, len(s.app.Endpoints))
	s.stateIDs = map[int]json.RawMessage{}
	next := 1
	for i, ep := range s.app.Endpoints {
		next++ // tabitem
		var stateIn []int
		in := make([]int, len(ep.Inputs))
		for j, c := range ep.Inputs {
			in[j] = next
			if c.Type == "state" {
				stateIn = append(stateIn, next)
				s.stateIDs[next] = mustMarshal(c.Default)
			}
			next++
		}
		out := make([]int, len(ep.Outputs))
		k := 0
		for j, c := range ep.Outputs {
			if c.Type == "state" && k < len(stateIn) {
				out[j] = stateIn[k]
				k++
				continue
			}
			out[j] = next
			if c.Type == "state" {
				s.stateIDs[next] = mustMarshal(c.Default)
			}
			next++
		}
		next += 2 // button, form
		s.compIDs[i] = [2][]int{in, out}
	}
}

func (s *Server) componentsJSON() ([]obj, obj, []obj) {
	var comps []obj
	var tabs []obj
	var deps []obj
	next := 1
	v5 := s.Mode.major() >= 5
	add := func(id int, typ string, props obj, skip bool, extra ...field) {
		o := obj{{"id", id}, {"type", typ}, {"props", props}, {"skip_api", skip}, {"component_class_id", classIDFor(typ)}}
		if v5 {
			o = o.set("key", nil)
		}
		comps = append(comps, append(o, extra...))
	}
	seen := map[int]bool{}
	for i, ep := range s.app.Endpoints {
		tab := next
		add(tab, "tabitem", obj{{"label", ep.APIName}, {"visible", true}, {"interactive", true}, {"name", "tab"}}, true)
		ids := s.compIDs[i]
		var children []obj
		for j, list := range [][]Component{ep.Inputs, ep.Outputs} {
			for k, c := range list {
				id := ids[j][k]
				if seen[id] {
					continue
				}
				seen[id] = true
				children = append(children, obj{{"id", id}})
				if c.Type == "state" {
					add(id, "state", obj{{"time_to_live", nil}, {"delete_callback", "<function default_delete_callback at 0x7fdff99afd80>"}, {"name", "state"}, {"_selectable", false}}, true)
					continue
				}
				kd := kindOf(c.Type)
				props := obj{}
				if c.Default != nil {
					props = props.set("value", c.Default)
				}
				props = props.set("label", c.Label).set("show_label", true).set("container", true).set("min_width", 160).
					set("visible", true).set("elem_classes", []any{}).set("name", c.Type).set("_selectable", false)
				ai := kd.apiInfo()
				extra := []field{{"api_info", ai}}
				if v5 {
					extra = append(extra, field{"api_info_as_input", kd.apiInfo()}, field{"api_info_as_output", kd.apiInfo()})
				}
				extra = append(extra, field{"example_inputs", kd.example})
				add(id, c.Type, props, false, extra...)
			}
		}
		last := ids[1]
		maxID := tab
		for _, l := range ids {
			for _, id := range l {
				maxID = max(maxID, id)
			}
		}
		_ = last
		button, form := maxID+1, maxID+2
		add(button, "button", obj{{"value", ep.APIName}, {"variant", "secondary"}, {"visible", true}, {"interactive", true}, {"elem_classes", []any{}}, {"name", "button"}, {"_selectable", false}}, true)
		add(form, "form", obj{{"scale", 0}, {"min_width", 0}, {"name", "form"}}, true)
		next = form + 1
		tabs = append(tabs, obj{{"id", tab}, {"children", append(children, obj{{"id", button}})}})

		var apiName any = ep.APIName
		if ep.Private && s.Mode.major() == 5 {
			apiName = false
		}
		dep := obj{}
		if s.Mode.atLeast(protoV3) {
			dep = dep.set("id", i)
		}
		dep = dep.set("targets", [][]any{{button, "click"}}).set("inputs", ids[0]).set("outputs", ids[1]).
			set("backend_fn", true).set("js", nil).set("queue", true).set("api_name", apiName)
		if v5 {
			dep = dep.set("api_description", nil)
		}
		dep = dep.set("scroll_to_output", false).set("show_progress", "full")
		if v5 {
			dep = dep.set("show_progress_on", nil)
		} else {
			dep = dep.set("every", nil)
		}
		dep = dep.set("batch", false).set("max_batch_size", 4).set("cancels", []any{}).
			set("types", obj{{"generator", ep.Generator != nil}, {"cancel", false}}).
			set("collects_event_data", false).set("trigger_after", nil).set("trigger_only_on_success", false).
			set("trigger_only_on_failure", false).set("trigger_mode", "once")
		switch {
		case s.Mode == Gradio6:
			vis := "public"
			if ep.Private {
				vis = "private"
			}
			dep = dep.set("api_visibility", vis)
		default:
			dep = dep.set("show_api", !ep.Private)
		}
		if v5 {
			dep = dep.set("rendered_in", nil).set("render_id", nil).set("connection", "sse").set("time_limit", nil).
				set("stream_every", 0.5).set("like_user_message", false).set("event_specific_args", nil).set("js_implementation", nil)
		}
		deps = append(deps, dep)
	}
	tabsID := next
	tabsComp := obj{{"id", tabsID}, {"type", "tabs"}, {"props", obj{{"visible", true}, {"name", "tabs"}}}, {"skip_api", true}, {"component_class_id", classIDFor("tabs")}}
	if v5 {
		tabsComp = tabsComp.set("key", nil)
	}
	comps = append(comps, tabsComp)
	layout := obj{{"id", 0}, {"children", []obj{{{"id", tabsID}, {"children", tabs}}}}}
	return comps, layout, deps
}

func classIDFor(t string) string {
	if k, ok := kinds[t]; ok {
		return k.classID
	}
	switch t {
	case "tabitem":
		return "524f8f6c03555aa8eb336eecada88e55313696937a3f7cd95b6d905834e0d0e2"
	case "button":
		return "c8cb8744aabd8d42bc62dc3862cf78e558e469e154d84e3290dcba2d6ad6bae5"
	case "form":
		return "e0ddabecfbe89a0e153c8bcba88854208754b3be9c8c05a55e434f51e07197bf"
	case "state":
		return "5f0dce92c68232ca57d3ddf41e9d4daf9450ec74d43e06d41d715c68eea98d03"
	case "tabs":
		return "93c2e3f0f6899ef050d568b61fc4be0bcadfd9dbd58e8a4db7c9937e559c300c"
	}
	return "0000000000000000000000000000000000000000000000000000000000000000"
}

func (s *Server) connectDelay(r *http.Request) bool {
	d := s.knobsNow().ConnectCost
	if d <= 0 {
		return true
	}
	return sleepCtx(r.Context(), d) == nil
}

func (s *Server) handleConfig(w http.ResponseWriter, r *http.Request) {
	if fail, st := s.takeFault(func(k *Knobs) *int { return &k.FailConfig }); fail {
		internalError(w, st)
		return
	}
	if !s.authorized(r) {
		s.protect(w, r, nil)
		return
	}
	if !s.connectDelay(r) {
		return
	}
	writeJSON(w, 200, s.config(r))
}

// config builds the /config body in the shape of the mode's Gradio version.
func (s *Server) config(r *http.Request) obj {
	comps, layout, deps := s.componentsJSON()
	k := s.knobsNow()
	var maxFile any
	if k.MaxFileSize > 0 {
		maxFile = k.MaxFileSize
	}
	var user any
	if s.authRequired() && s.authorized(r) {
		user = s.Username
	}
	hasState := len(s.stateIDs) > 0
	m := s.Mode
	c := obj{{"version", m.Version()}}
	if m.major() >= 5 {
		c = c.set("api_prefix", m.APIPrefix())
	}
	c = c.set("mode", "blocks").set("app_id", s.AppIDValue()).set("dev_mode", false)
	if m.major() >= 5 {
		c = c.set("vibe_mode", false)
	}
	c = c.set("analytics_enabled", false).set("components", comps).set("css", "")
	if m == Gradio4SSEv3 || m.major() >= 5 {
		c = c.set("connect_heartbeat", hasState)
	}
	c = c.set("js", "").set("head", "").set("title", s.app.Title).set("space_id", nil).
		set("enable_queue", true).set("show_error", true)
	if m != Gradio6 {
		c = c.set("show_api", true)
	}
	c = c.set("is_colab", false)
	if m.atLeast(protoV21) {
		c = c.set("max_file_size", maxFile)
	}
	c = c.set("stylesheets", []any{}).set("theme", "default").set("protocol", m.Protocol()).
		set("body_css", obj{{"body_background_fill", "white"}, {"body_text_color", "#27272a"}, {"body_background_fill_dark", "#0f0f11"}, {"body_text_color_dark", "#f4f4f5"}}).
		set("fill_height", false)
	if m.major() >= 5 {
		c = c.set("fill_width", false).set("theme_hash", "2fa39f6df94156f7ef9d84370dbb2657d672827c75f082ac995879c32290c5ca").
			set("pwa", false).set("pages", [][]any{{"", "Home", true}}).set("page", obj{{"", obj{{"layout", layout}, {"components", compIDs(comps)}, {"dependencies", indexes(len(deps))}}}}).
			set("mcp_server", false).set("i18n_translations", nil)
	}
	if s.authRequired() {
		c = c.set("auth_required", true).set("auth_message", nil)
	}
	c = c.set("dependencies", deps).set("layout", layout).set("username", user).set("root", rootURL(r))
	if m.major() < 5 {
		c = c.set("path", "")
	}
	return c
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func compIDs(comps []obj) []any {
	out := make([]any, 0, len(comps))
	for _, c := range comps {
		out = append(out, c[0].v)
	}
	return out
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	if !s.connectDelay(r) {
		return
	}
	writeJSON(w, 200, s.info())
}

// info builds the /info body (§3): State parameters omitted.
func (s *Server) info() obj {
	named := obj{}
	m := s.Mode
	for _, ep := range s.app.Endpoints {
		if ep.Private {
			continue
		}
		var params, returns []obj
		for _, c := range ep.Inputs {
			if c.Type == "state" {
				continue
			}
			kd := kindOf(c.Type)
			name := c.ParameterName
			if name == "" {
				name = c.Label
			}
			p := obj{{"label", c.Label}}
			if m.atLeast(protoV21) {
				var def any
				if c.HasDefault {
					def = c.Default
				}
				p = p.set("parameter_name", name).set("parameter_has_default", c.HasDefault).set("parameter_default", def)
			}
			p = p.set("type", kd.apiInfo()).set("python_type", obj{{"type", kd.pyType}, {"description", kd.pyTypeDesc}}).
				set("component", kd.class).set("example_input", kd.example)
			params = append(params, p)
		}
		for _, c := range ep.Outputs {
			if c.Type == "state" {
				continue
			}
			kd := kindOf(c.Type)
			returns = append(returns, obj{{"label", c.Label}, {"type", kd.apiInfo()},
				{"python_type", obj{{"type", kd.pyType}, {"description", ""}}}, {"component", kd.class}})
		}
		if params == nil {
			params = []obj{}
		}
		if returns == nil {
			returns = []obj{}
		}
		e := obj{{"parameters", params}, {"returns", returns}}
		switch {
		case m == Gradio6:
			e = e.set("api_visibility", "public").set("description", ep.Description)
		case m.major() >= 5:
			e = e.set("show_api", true).set("description", ep.Description)
		}
		named = named.set("/"+ep.APIName, e)
	}
	return obj{{"named_endpoints", named}, {"unnamed_endpoints", obj{}}}
}

var _ = time.Second
