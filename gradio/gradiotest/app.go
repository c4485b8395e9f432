package gradiotest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/internal/backoff"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// HandlerFunc runs one call of a plain endpoint. It returns one value per
// output component, in order (values for State outputs are stored in the
// session and sent to the client as null). ctx is cancelled when the call is
// cancelled (POST cancel), when the client drops its data stream, or when the
// server closes. A returned *Error becomes a gr.Error; any other error is
// reported like an unexpected Python exception.
type HandlerFunc func(ctx context.Context, c *Call) ([]any, error)

// GeneratorFunc runs one call of a generator endpoint. Each yield sends the
// given outputs as a process_generating message; yield returns a non-nil
// error once the call is dead (cancelled, stream dropped, server closing) and
// the generator should then return. The last yielded values are the final
// result.
type GeneratorFunc func(ctx context.Context, c *Call, yield func(outputs ...any) error) error

// Error is the simulated gr.Error: it fails the call with a message shown to
// the user. The zero Duration means Gradio's default of 10 seconds; an empty
// Title means "Error".
type Error struct {
	Message  string
	Title    string
	Duration float64
	// Hidden is the negation of gr.Error's visible flag.
	Hidden bool
}

func (e *Error) Error() string { return e.Message }

// NewError returns a gr.Error with Gradio's defaults.
func NewError(format string, args ...any) *Error {
	return &Error{Message: fmt.Sprintf(format, args...)}
}

// Call is what a handler gets about the request it serves.
type Call struct {
	// Inputs holds one JSON value per input component, in order. For State
	// inputs it is the value stored in the session (the client sends null).
	Inputs []json.RawMessage
	// APIName, SessionHash and EventID identify the call.
	APIName     string
	SessionHash string
	EventID     string
	// Header holds the headers of the request that submitted the call (the
	// queue join, /call or /run POST), e.g. x-gradio-user or x-ip-token.
	Header http.Header

	srv *Server
	ev  *event
}

// String decodes input i as a string.
func (c *Call) String(i int) (string, error) {
	var s string
	err := c.decode(i, &s)
	return s, err
}

// Float decodes input i as a number.
func (c *Call) Float(i int) (float64, error) {
	var f float64
	err := c.decode(i, &f)
	return f, err
}

// Decode unmarshals input i into v.
func (c *Call) Decode(i int, v any) error { return c.decode(i, v) }

func (c *Call) decode(i int, v any) error {
	if i < 0 || i >= len(c.Inputs) {
		return fmt.Errorf("input %d of %d does not exist", i, len(c.Inputs))
	}
	if err := json.Unmarshal(c.Inputs[i], v); err != nil {
		return fmt.Errorf("input %d: %w", i, err)
	}
	return nil
}

// Progress sends a progress message (gr.Progress) for this call.
func (c *Call) Progress(index, length int, unit, desc string) {
	if c.ev == nil {
		return
	}
	var d any
	if desc != "" {
		d = desc
	}
	c.srv.emit(c.ev, msgProgress, obj{}.
		set("progress_data", []obj{{{"index", index}, {"length", length}, {"unit", unit}, {"progress", nil}, {"desc", d}}}))
}

// Log sends a log message (gr.Info, gr.Warning, gr.Success) for this call.
// level is "info", "warning", "success" or "error"; the title defaults to the
// capitalised level.
func (c *Call) Log(level, message string) {
	if c.ev == nil {
		return
	}
	title := strings.ToUpper(level[:1]) + level[1:]
	c.srv.emit(c.ev, msgLog, obj{}.
		set("log", message).set("level", level).set("duration", 10.0).set("visible", true).set("title", title))
}

// Sleep waits d multiplied by the server's TimeScale knob, or until ctx ends.
func (c *Call) Sleep(ctx context.Context, d time.Duration) error {
	return backoff.Sleep(ctx, c.srv.scaled(d))
}

// StepDelay is the server's generator step delay knob, already scaled.
func (c *Call) StepDelay() time.Duration {
	d := c.srv.knobsNow().StepDelay
	switch {
	case d == 0:
		d = DefaultStepDelay
	case d < 0:
		return 0
	}
	return c.srv.scaled(d)
}

// UploadDir is the directory from which the server serves files; handlers
// that produce files write them below it.
func (c *Call) UploadDir() string { return c.srv.uploadDir }

// FileData returns the FileData dict Gradio sends for a server file at path,
// with meta when the protocol has it and url built from the request's root.
func (c *Call) FileData(path string) any {
	var size any
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	fd := obj{}.set("path", path)
	url := any(nil)
	if c.ev != nil && c.ev.root != "" && c.srv.mode().atLeast(protoV1) { // 4.8 sent null
		url = c.ev.root + c.srv.prefix() + "/file=" + path
	}
	fd = fd.set("url", url).set("size", size).set("orig_name", filepath.Base(path)).set("mime_type", nil)
	if c.srv.mode().atLeast(protoV1) {
		fd = fd.set("is_stream", false)
	}
	if c.srv.mode().atLeast(protoV21) {
		fd = fd.set("meta", obj{{"_type", "gradio.FileData"}})
	}
	return fd
}

// InputFile checks that input i is a FileData dict pointing at a file the
// server may read (uploaded or produced by it) and returns its path.
func (c *Call) InputFile(i int) (string, error) {
	var fd struct {
		Path string         `json:"path"`
		Meta map[string]any `json:"meta"`
	}
	if err := c.decode(i, &fd); err != nil || fd.Path == "" {
		return "", fmt.Errorf("input %d is not a FileData dict with a path", i)
	}
	if c.srv.mode().atLeast(protoV21) && (fd.Meta == nil || fd.Meta["_type"] != "gradio.FileData") {
		return "", pyErr("The 'meta' field must be explicitly provided in the input data and be equal to {'_type': 'gradio.FileData'}.")
	}
	if !c.srv.allowedFile(fd.Path) {
		return "", pyErr("Cannot move %s to the gradio cache dir because it was not uploaded by a user.", fd.Path)
	}
	return fd.Path, nil
}

// Component is one input or output of an endpoint.
type Component struct {
	// Type is the Gradio component type in lower case: "textbox", "number",
	// "file", "json" or "state". Others are accepted and described as JSON.
	Type string
	// Label is the component's label; it names the parameter in /info.
	Label string
	// ParameterName is the Python parameter name in /info; "" means Label.
	ParameterName string
	// Default is the component's initial value (for State: the value each
	// session starts with). HasDefault marks the parameter as optional in /info.
	Default    any
	HasDefault bool
}

// Textbox returns a text component.
func Textbox(label string) Component { return Component{Type: "textbox", Label: label} }

// Number returns a number component.
func Number(label string) Component { return Component{Type: "number", Label: label} }

// File returns a single-file component (FileData in and out).
func File(label string) Component { return Component{Type: "file", Label: label} }

// JSON returns a JSON component (any value).
func JSON(label string) Component { return Component{Type: "json", Label: label} }

// State returns a gr.State component whose per-session value starts as
// initial. A State that appears among both the inputs and the outputs of one
// endpoint is one component: the k-th State input and the k-th State output
// are the same.
func State(initial any) Component { return Component{Type: "state", Default: initial} }

// Endpoint is one event listener with an api_name.
type Endpoint struct {
	APIName     string
	Description string
	Inputs      []Component
	Outputs     []Component
	Handler     HandlerFunc   // for plain endpoints
	Generator   GeneratorFunc // for generators (set exactly one)
	// ConcurrencyLimit is how many calls of this endpoint run at once. Zero
	// means the server's DefaultConcurrencyLimit (Gradio's default: 1);
	// negative means unlimited.
	ConcurrencyLimit int
	// TabLabel and ButtonLabel only decorate the config's layout (the tab and
	// the button that trigger the endpoint); "" means APIName.
	TabLabel, ButtonLabel string
	// Private hides the endpoint from /info (api_name false / api_visibility
	// "private"); it can still be called by fn_index.
	Private bool
	// Renders, when set, makes this a gr.render function with that render
	// id (Gradio 5+ modes; real ids start at 0): its process_completed
	// carries a render_config with the components and dependencies of the
	// endpoints whose RenderedIn equals it.
	Renders *int
	// RenderedIn, when set, keeps the endpoint out of /config and /info:
	// it appears only in the render_config of the endpoint whose Renders
	// equals it. The simulator accepts its calls from any session (real
	// Gradio keeps rendered dependencies per session; a deliberate
	// simplification).
	RenderedIn *int
	// Stream makes this a streaming-input event (connection "stream",
	// Gradio 5+ modes; Handler only): see streaming.go.
	Stream bool
}

// App is a simulated Gradio app: its endpoints in fn_index order. Build it
// before handing it to NewServer; it must not change afterwards.
type App struct {
	Title     string
	Endpoints []*Endpoint
}

// NewApp returns an empty app.
func NewApp() *App { return &App{Title: "gradiotest"} }

// Handle adds a plain endpoint. Nil inputs mean one Textbox "text"; nil
// outputs mean one Textbox "output". It returns the endpoint for further
// settings (ConcurrencyLimit, Description, ...).
func (a *App) Handle(apiName string, h HandlerFunc, inputs, outputs []Component) *Endpoint {
	return a.add(&Endpoint{APIName: apiName, Handler: h, Inputs: inputs, Outputs: outputs})
}

// HandleGenerator adds a generator endpoint; see Handle.
func (a *App) HandleGenerator(apiName string, g GeneratorFunc, inputs, outputs []Component) *Endpoint {
	return a.add(&Endpoint{APIName: apiName, Generator: g, Inputs: inputs, Outputs: outputs})
}

func (a *App) add(e *Endpoint) *Endpoint {
	e.APIName = strings.TrimPrefix(e.APIName, "/")
	if e.Inputs == nil {
		e.Inputs = []Component{Textbox("text")}
	}
	if e.Outputs == nil {
		e.Outputs = []Component{Textbox("output")}
	}
	a.Endpoints = append(a.Endpoints, e)
	return e
}

// DefaultApp returns the app of the captured transcripts: upper, count
// (generator), slow, counter (gr.State), fail (gr.Error) and reverse_file.
func DefaultApp() *App {
	a := &App{Title: "gradiotest research app"}
	a.Handle("upper", builtinUpper, []Component{Textbox("text")}, []Component{Textbox("upper")}).
		Description = "plain function: text -> uppercased text"
	a.HandleGenerator("count", builtinCount,
		[]Component{{Type: "number", Label: "n", Default: 5, HasDefault: true}}, []Component{Textbox("partial")}).
		Description = "generator: yields several partial outputs with small sleeps"
	a.Handle("slow", builtinSlow,
		[]Component{{Type: "number", Label: "seconds", Default: 3, HasDefault: true}}, []Component{Textbox("result")}).
		Description = "long-running: sleeps N seconds"
	counter := a.Handle("counter", builtinCounter,
		[]Component{{Type: "textbox", Label: "item", ParameterName: "text"}, State([]any{})},
		[]Component{Textbox("history"), State(nil)})
	counter.Description, counter.TabLabel, counter.ButtonLabel = "uses gr.State: appends text to a per-session list", "state", "add"
	a.Handle("fail", builtinFail, []Component{Textbox("text")}, []Component{Textbox("never")}).
		Description = "raises gr.Error"
	rev := a.Handle("reverse_file", builtinReverseFile,
		[]Component{{Type: "file", Label: "in", ParameterName: "f"}}, []Component{File("out")})
	rev.Description, rev.TabLabel, rev.ButtonLabel = "takes a file, returns a (new) file", "file", "reverse"
	return a
}

func builtinUpper(_ context.Context, c *Call) ([]any, error) {
	s, err := c.String(0)
	if err != nil {
		return nil, err
	}
	// Python's str.upper applies full case mapping (ß -> SS, ﬁ -> FI), which
	// strings.ToUpper does not.
	return []any{cases.Upper(language.Und).String(s)}, nil
}

func builtinCount(ctx context.Context, c *Call, yield func(...any) error) error {
	n, err := c.Float(0)
	if err != nil {
		return err
	}
	var parts []string
	for i := 0; i < int(n); i++ {
		if err := backoff.Sleep(ctx, c.StepDelay()); err != nil {
			return err
		}
		parts = append(parts, fmt.Sprint(i))
		if err := yield(strings.Join(parts, " ")); err != nil {
			return err
		}
	}
	return nil
}

func builtinSlow(ctx context.Context, c *Call) ([]any, error) {
	sec, err := c.Float(0)
	if err != nil {
		return nil, err
	}
	if err := c.Sleep(ctx, time.Duration(sec*float64(time.Second))); err != nil {
		return nil, err
	}
	return []any{fmt.Sprintf("slept %.2fs", sec)}, nil
}

func builtinCounter(_ context.Context, c *Call) ([]any, error) {
	s, err := c.String(0)
	if err != nil {
		return nil, err
	}
	var items []string
	if len(c.Inputs) > 1 && string(c.Inputs[1]) != "null" {
		if err := c.Decode(1, &items); err != nil {
			return nil, err
		}
	}
	items = append(items, s)
	return []any{fmt.Sprintf("%d items: %s", len(items), strings.Join(items, ", ")), items}, nil
}

func builtinFail(_ context.Context, c *Call) ([]any, error) {
	s, _ := c.String(0)
	return nil, NewError("deliberate failure for input '%s'", s)
}

func builtinReverseFile(_ context.Context, c *Call) ([]any, error) {
	p, err := c.InputFile(0)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	slices.Reverse(b)
	out := filepath.Join(filepath.Dir(p), "reversed_"+filepath.Base(p))
	if err := os.WriteFile(out, b, 0o600); err != nil {
		return nil, err
	}
	return []any{c.FileData(out)}, nil
}

// pyError carries an error text copied verbatim from Gradio (capitalised,
// with punctuation), which Go's error-string conventions would not allow.
type pyError struct{ msg string }

func (e *pyError) Error() string { return e.msg }

func pyErr(format string, args ...any) error { return &pyError{fmt.Sprintf(format, args...)} }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// counters counts handler starts per api_name.
type counters struct {
	mu sync.Mutex // guards m
	m  map[string]int
}

func (c *counters) inc(name string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[name]++
	c.mu.Unlock()
}

func (c *counters) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[strings.TrimPrefix(name, "/")]
}

func (c *counters) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.m))
	for k, v := range c.m {
		m[k] = v
	}
	return m
}

func (c *counters) reset() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}
