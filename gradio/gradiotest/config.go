package gradiotest

import (
	"encoding/json"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/internal/backoff"
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

// tabLayout is the ids of one endpoint's tab.
type tabLayout struct {
	tab, button, form int // form is 0 when nothing needs one
	states            []int
	formed, loose     []int // non-state components inside and outside the form
}

// formable reports whether Gradio wraps a component in a form (textbox and
// number do; file does not).
func formable(t string) bool { return t == "textbox" || t == "number" }

// buildComponents assigns component ids like the captured Blocks app: per
// endpoint a tabitem, its States, its inputs, its outputs, a button and, if
// any input or output is a form field, a form.
func (s *Server) buildComponents() {
	s.compIDs = make([][2][]int, len(s.app.Endpoints))
	s.tabs = make([]tabLayout, len(s.app.Endpoints))
	s.stateIDs = map[int]json.RawMessage{}
	next := max(s.FirstComponentID, 1)
	alloc := func() int { next++; return next - 1 }
	for i, ep := range s.app.Endpoints {
		tl := tabLayout{tab: alloc()}
		in := make([]int, len(ep.Inputs))
		out := make([]int, len(ep.Outputs))
		// States first: the k-th State input and the k-th State output share one.
		var stateIn []int
		for j, c := range ep.Inputs {
			if c.Type == "state" {
				in[j] = alloc()
				stateIn = append(stateIn, in[j])
				tl.states = append(tl.states, in[j])
				s.stateIDs[in[j]] = mustMarshal(c.Default)
			}
		}
		k := 0
		for j, c := range ep.Outputs {
			if c.Type != "state" {
				continue
			}
			if k < len(stateIn) {
				out[j] = stateIn[k]
				k++
				continue
			}
			out[j] = alloc()
			tl.states = append(tl.states, out[j])
			s.stateIDs[out[j]] = mustMarshal(c.Default)
		}
		place := func(id int, t string) {
			if formable(t) {
				tl.formed = append(tl.formed, id)
			} else {
				tl.loose = append(tl.loose, id)
			}
		}
		for j, c := range ep.Inputs {
			if c.Type != "state" {
				in[j] = alloc()
				place(in[j], c.Type)
			}
		}
		for j, c := range ep.Outputs {
			if c.Type != "state" {
				out[j] = alloc()
				place(out[j], c.Type)
			}
		}
		tl.button = alloc()
		if len(tl.formed) > 0 {
			tl.form = alloc()
		}
		s.compIDs[i] = [2][]int{in, out}
		s.tabs[i] = tl
	}
	s.tabsID = next
}

// rendered is what one gr.render function's render_config carries.
type rendered struct {
	comps, deps []obj
	tabs        []obj
}

func (s *Server) componentsJSON() ([]obj, obj, []obj) {
	comps, layout, deps, _ := s.componentsAndRenders()
	return comps, layout, deps
}

// componentsAndRenders builds config's components, layout and
// dependencies, and apart from them those of rendered endpoints, by
// render id.
func (s *Server) componentsAndRenders() ([]obj, obj, []obj, map[int]*rendered) {
	var comps []obj
	var tabs []obj
	var deps []obj
	renders := map[int]*rendered{}
	v5 := s.Mode.major() >= 5
	dstComps, dstTabs, dstDeps := &comps, &tabs, &deps
	var renderedIn *int
	add := func(id int, typ string, props obj, skip bool, extra ...field) {
		if renderedIn != nil {
			props = props.set("rendered_in", *renderedIn)
		}
		o := obj{{"id", id}, {"type", typ}, {"props", props}, {"skip_api", skip}, {"component_class_id", classIDFor(typ)}}
		if v5 {
			o = o.set("key", nil)
		}
		*dstComps = append(*dstComps, append(o, extra...))
	}
	for i, ep := range s.app.Endpoints {
		tl := s.tabs[i]
		ids := s.compIDs[i]
		renderedIn = ep.RenderedIn
		dstComps, dstTabs, dstDeps = &comps, &tabs, &deps
		if renderedIn != nil {
			r := renders[*renderedIn]
			if r == nil {
				r = &rendered{}
				renders[*renderedIn] = r
			}
			dstComps, dstTabs, dstDeps = &r.comps, &r.tabs, &r.deps
		}
		add(tl.tab, "tabitem", pk(v5, obj{{"label", or(ep.TabLabel, ep.APIName)}, {"visible", true}, {"interactive", true}}, nil).set("render_children", false).set("name", tabName(v5)), true)
		seen := map[int]bool{}
		for j, list := range [][]Component{ep.Inputs, ep.Outputs} {
			for k, c := range list {
				id := ids[j][k]
				if seen[id] {
					continue
				}
				seen[id] = true
				if c.Type == "state" {
					add(id, "state", obj{{"time_to_live", nil}, {"delete_callback", "<function default_delete_callback at 0x7fdff99afd80>"}, {"name", "state"}, {"_selectable", false}}, true)
					continue
				}
				kd := kindOf(c.Type)
				extra := []field{{"api_info", kd.apiInfo()}}
				if v5 {
					extra = append(extra, field{"api_info_as_input", kd.apiInfo()}, field{"api_info_as_output", kd.apiInfo()})
				}
				extra = append(extra, field{"example_inputs", kd.example})
				add(id, c.Type, s.componentProps(c), false, extra...)
			}
		}
		add(tl.button, "button", pk(v5, obj{{"value", or(ep.ButtonLabel, ep.APIName)}, {"variant", "secondary"}, {"size", "lg"}, {"visible", true}, {"interactive", true}, {"elem_classes", []any{}}}, []string{"value"}).
			set("name", "button").set("_selectable", false), true)
		var children []obj
		for _, id := range tl.states {
			children = append(children, obj{{"id", id}})
		}
		if tl.form != 0 {
			add(tl.form, "form", pk(v5, obj{{"scale", 0}, {"min_width", 0}}, nil).set("name", "form"), true)
			var formed []obj
			for _, id := range tl.formed {
				formed = append(formed, obj{{"id", id}})
			}
			children = append(children, obj{{"id", tl.form}, {"children", formed}})
		}
		for _, id := range tl.loose {
			children = append(children, obj{{"id", id}})
		}
		children = append(children, obj{{"id", tl.button}})
		*dstTabs = append(*dstTabs, obj{{"id", tl.tab}, {"children", children}})

		var apiName any = ep.APIName
		if ep.Private && s.Mode.major() == 5 {
			apiName = false
		}
		dep := obj{}
		if s.Mode.atLeast(protoV3) {
			dep = dep.set("id", i)
		}
		dep = dep.set("targets", [][]any{{tl.button, "click"}}).set("inputs", ids[0]).set("outputs", ids[1]).
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
			var in, rid any
			if ep.RenderedIn != nil {
				in = *ep.RenderedIn
			}
			if ep.Renders != nil {
				rid = *ep.Renders
			}
			conn := "sse"
			if ep.Stream {
				conn = "stream"
			}
			dep = dep.set("rendered_in", in).set("render_id", rid).set("connection", conn).set("time_limit", nil).
				set("stream_every", 0.5).set("like_user_message", false).set("event_specific_args", nil).set("js_implementation", nil)
		}
		*dstDeps = append(*dstDeps, dep)
	}
	renderedIn = nil
	tabsComp := obj{{"id", s.tabsID}, {"type", "tabs"}, {"props", pk(v5, obj{{"visible", true}}, nil).set("name", "tabs")}, {"skip_api", true}, {"component_class_id", classIDFor("tabs")}}
	if v5 {
		tabsComp = tabsComp.set("key", nil)
	}
	comps = append(comps, tabsComp)
	slices.SortStableFunc(comps, func(a, b obj) int { return a[0].v.(int) - b[0].v.(int) })
	layout := obj{{"id", 0}, {"children", []obj{{{"id", s.tabsID}, {"children", tabs}}}}}
	return comps, layout, deps, renders
}

// renderConfig is the render_config of endpoint ep's completion: nil
// unless ep is a gr.render function.
func (s *Server) renderConfig(ep *Endpoint) any {
	if ep == nil || ep.Renders == nil {
		return nil
	}
	id := *ep.Renders
	_, _, _, renders := s.componentsAndRenders()
	r := renders[id]
	if r == nil {
		r = &rendered{}
	}
	comps, deps := r.comps, r.deps
	if comps == nil {
		comps = []obj{}
	}
	if deps == nil {
		deps = []obj{}
	}
	return obj{{"components", comps}, {"dependencies", deps},
		{"layout", obj{{"id", id}, {"children", r.tabs}}}, {"render_id", id}}
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// pk appends Gradio 5's preserved_by_key prop.
func pk(v5 bool, o obj, keys []string) obj {
	if !v5 {
		return o
	}
	if keys == nil {
		keys = []string{}
	}
	return o.set("preserved_by_key", keys)
}

func tabName(v5 bool) string {
	if v5 {
		return "tab"
	}
	return "tabitem"
}

// componentProps mirrors the props of the captured app's components.
func (s *Server) componentProps(c Component) obj {
	v5 := s.Mode.major() >= 5
	o := obj{}
	switch c.Type {
	case "textbox":
		if !v5 {
			o = o.set("value", "")
		}
		o = o.set("type", "text").set("lines", 1)
		if !v5 {
			o = o.set("max_lines", 20)
		}
		o = o.set("label", c.Label).set("show_label", true).set("container", true).set("min_width", 160).
			set("visible", true).set("autofocus", false).set("autoscroll", true).set("elem_classes", []any{})
		o = pk(v5, o, []string{"value"}).set("rtl", false).set("show_copy_button", false)
		if v5 {
			o = o.set("submit_btn", false).set("stop_btn", false)
		}
	case "number":
		if c.Default != nil {
			o = o.set("value", c.Default)
		}
		o = pk(v5, o.set("label", c.Label).set("show_label", true).set("container", true).set("min_width", 160).
			set("visible", true).set("elem_classes", []any{}), []string{"value"}).set("step", 1)
	case "file":
		o = pk(v5, o.set("file_count", "single").set("type", "filepath").set("label", c.Label).set("show_label", true).
			set("container", true).set("min_width", 160).set("visible", true).set("elem_classes", []any{}), []string{"value"}).
			set("allow_reordering", false)
	default:
		if c.Default != nil {
			o = o.set("value", c.Default)
		}
		o = pk(v5, o.set("label", c.Label).set("show_label", true).set("container", true).set("min_width", 160).
			set("visible", true).set("elem_classes", []any{}), []string{"value"})
	}
	return o.set("name", c.Type).set("_selectable", false)
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
	k := s.knobsNow()
	d := k.ConnectCost
	if k.ConnectJitter > 0 {
		d += time.Duration(mrand.Int64N(int64(k.ConnectJitter)))
	}
	if d <= 0 {
		return true
	}
	return backoff.Sleep(r.Context(), d) == nil
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
	c = c.set("stylesheets", []any{}).set("theme", "default")
	if m.major() >= 4 {
		c = c.set("protocol", m.Protocol()) // Gradio 3 has none
	}
	c = c.set("body_css", obj{{"body_background_fill", "white"}, {"body_text_color", "#27272a"}, {"body_background_fill_dark", "#0f0f11"}, {"body_text_color_dark", "#f4f4f5"}}).
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

// info builds the /info body: State parameters omitted, as Gradio does.
func (s *Server) info() obj {
	named := obj{}
	m := s.Mode
	for _, ep := range s.app.Endpoints {
		if ep.Private || ep.RenderedIn != nil {
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
			if m.major() < 4 {
				p = gradio3Value(p, c.Type)
			}
			params = append(params, p)
		}
		for _, c := range ep.Outputs {
			if c.Type == "state" {
				continue
			}
			kd := kindOf(c.Type)
			r := obj{{"label", c.Label}, {"type", kd.apiInfo()},
				{"python_type", obj{{"type", kd.pyType}, {"description", ""}}}, {"component", kd.class}}
			if m.major() < 4 {
				r = gradio3Value(r, c.Type)
			}
			returns = append(returns, r)
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

// gradio3Serializers are the serializer names of Gradio 3's /info by
// component type (3.50.2's gradio_client.serializing).
var gradio3Serializers = map[string]string{"textbox": "StringSerializable", "number": "NumberSerializable",
	"file": "FileSerializable", "json": "JSONSerializable"}

// gradio3Value gives an /info parameter or return Gradio 3's shape: its
// serializer, and a file's Gradio 3 types (a path, or the file dict).
func gradio3Value(o obj, typ string) obj {
	ser, ok := gradio3Serializers[typ]
	if !ok {
		ser = "JSONSerializable"
	}
	if typ == "file" {
		desc := "filepath on your computer (or URL) of file"
		for i := range o {
			switch o[i].k {
			case "type":
				o[i].v = obj{{"oneOf", []any{obj{{"type", "string"}, {"description", desc}}, obj{{"type", "object"},
					{"properties", obj{{"name", obj{{"type", "string"}, {"description", "name of file"}}},
						{"data", obj{{"type", "string"}, {"description", "base64 representation of file"}}},
						{"size", obj{{"type", "integer"}, {"description", "size of image in bytes"}}},
						{"is_file", obj{{"type", "boolean"}, {"description", "true if the file has been uploaded to the server"}}},
						{"orig_name", obj{{"type", "string"}, {"description", "original name of the file"}}}}},
					{"required", []string{"name", "data"}}}}}}
			case "python_type":
				o[i].v = obj{{"type", "str"}, {"description", desc}}
			case "example_input":
				o[i].v = "https://github.com/gradio-app/gradio/raw/main/test/test_files/sample_file.pdf"
			}
		}
	}
	return o.set("serializer", ser)
}
