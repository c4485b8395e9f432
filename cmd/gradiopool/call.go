package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gradiopool/gradiopool/gradio"
)

const callUsage = `usage: gradiopool call SRC API_NAME [ARGS_JSON] [flags]
       gradiopool call SRC --list

Calls one endpoint of a Gradio app through the Go client and prints the
outputs as one JSON array (State outputs dropped). SRC is a Space id
(owner/name, resolved through the Hub) or the app's URL. API_NAME is the
api_name with or without "/", or "#N" for an fn_index.

ARGS_JSON is a JSON array of positional arguments, e.g. '["hello", 3]', or a
JSON object of keyword arguments, e.g. '{"n": 3}'; anything that is not JSON
is passed as one string argument. Omitted trailing parameters take their
defaults. File arguments: an object {"path": "./x.txt"} naming an existing
local file, or a string "@./x.txt", is uploaded; {"path": "https://..."} is
passed by URL. Output files are printed as FileData JSON; use --download DIR
to save them.

--list prints the app's callable endpoints with their parameters (from
/info) instead of calling one.

The Hugging Face token is read from the environment variable named by
--token-env (default HF_TOKEN), never from the command line.

With --stream every update is printed as one JSON object per line:
{"kind":"queued","rank":0,"queue_size":1,"eta_s":0.5}, {"kind":"started"},
{"kind":"progress",...}, {"kind":"log",...}, {"kind":"output","data":[...]}
and finally {"kind":"completed","data":[...]} or {"kind":"error","error":"..."}.

A gr.Error (or any failure) makes the command exit non-zero with the message.

Flags:
`

// runCall implements "gradiopool call".
func runCall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stream := fs.Bool("stream", false, "print every update as a JSON line")
	hub := fs.String("hub", "", "Hub API base URL (default "+gradio.DefaultHubURL+")")
	tokenEnv := fs.String("token-env", "HF_TOKEN", "environment variable holding the Hugging Face token")
	timeout := fs.Duration("timeout", 0, "give up (and cancel the call) after this long; 0 = no limit")
	wake := fs.Duration("wake-timeout", 0, "wait this long for a sleeping or building Space")
	download := fs.String("download", "", "save output files into this directory (prints their local paths)")
	list := fs.Bool("list", false, "list the callable endpoints and their parameters")
	var headers headerFlags
	fs.Var(&headers, "header", "extra request header KEY=VALUE for the app (repeatable), e.g. x-ip-token=...")
	fs.Usage = func() {
		fmt.Fprint(stderr, callUsage)
		fs.PrintDefaults()
	}
	// Flags may come before or after the positional arguments.
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
		if len(rest) == 0 {
			break
		}
	}
	if (len(pos) < 2 && !(*list && len(pos) == 1)) || len(pos) > 3 {
		fs.Usage()
		return fmt.Errorf("%w: call needs SRC API_NAME [ARGS_JSON]", errUsage)
	}
	src, endpoint := pos[0], ""
	if len(pos) > 1 {
		endpoint = pos[1]
	}
	var callArgs []any
	if len(pos) == 3 {
		var err error
		if callArgs, err = parseCallArgs(pos[2]); err != nil {
			return fmt.Errorf("%w: ARGS_JSON: %v", errUsage, err)
		}
	}
	opts := []gradio.Option{gradio.WithWakeTimeout(*wake)}
	if *hub != "" {
		opts = append(opts, gradio.WithHubURL(*hub))
	}
	if tok := os.Getenv(*tokenEnv); tok != "" {
		opts = append(opts, gradio.WithHFToken(tok))
	}
	for _, h := range headers {
		opts = append(opts, gradio.WithHeader(h[0], h[1]))
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	c, err := gradio.Connect(ctx, src, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	if *list {
		return listEndpoints(ctx, c, stdout)
	}
	job, err := c.Submit(ctx, endpoint, callArgs...)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	if *stream {
		for ev := range job.Events() {
			line := eventLine(ev)
			if ev.Kind == gradio.EventOutput || ev.Kind == gradio.EventCompleted {
				data, err := saveFiles(ctx, c, ev.Data, *download, ev.Kind == gradio.EventCompleted)
				if err != nil {
					return err
				}
				line.Data = data
			}
			if err := enc.Encode(line); err != nil {
				return err
			}
		}
	}
	out, err := job.Wait(ctx)
	if err != nil {
		var ae *gradio.AppError
		if errors.As(err, &ae) {
			return fmt.Errorf("%s: %w", endpoint, err)
		}
		return err
	}
	if *stream {
		return nil
	}
	out, err = saveFiles(ctx, c, out, *download, true)
	if err != nil {
		return err
	}
	if out == nil {
		out = []json.RawMessage{}
	}
	return enc.Encode(out)
}

// callEvent is the --stream line format.
type callEvent struct {
	Kind      string            `json:"kind"`
	Rank      *int              `json:"rank,omitempty"`
	QueueSize *int              `json:"queue_size,omitempty"`
	ETA       *float64          `json:"eta_s,omitempty"`
	Progress  []gradio.Progress `json:"progress,omitempty"`
	Log       string            `json:"log,omitempty"`
	Level     string            `json:"level,omitempty"`
	Title     string            `json:"title,omitempty"`
	Data      []json.RawMessage `json:"data,omitempty"`
	Error     string            `json:"error,omitempty"`
}

func eventLine(ev gradio.Event) callEvent {
	l := callEvent{Kind: ev.Kind.String()}
	switch ev.Kind {
	case gradio.EventQueued:
		if ev.Rank >= 0 {
			l.Rank = &ev.Rank
		}
		if ev.QueueSize >= 0 {
			l.QueueSize = &ev.QueueSize
		}
		fallthrough
	case gradio.EventStarted:
		if ev.ETA > 0 {
			s := ev.ETA.Seconds()
			l.ETA = &s
		}
	case gradio.EventProgress:
		l.Progress = ev.Progress
	case gradio.EventLog:
		l.Log, l.Level, l.Title = ev.Log, ev.Level, ev.Title
	case gradio.EventError:
		l.Error = ev.Err.Error()
	}
	return l
}

// parseCallArgs turns ARGS_JSON into Predict arguments (see callUsage).
func parseCallArgs(s string) ([]any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return []any{fileArg(s)}, nil // not JSON: one string argument
	}
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = fileArg(x[i])
		}
		return x, nil
	case map[string]any:
		if _, isFile := fileArg(x).(gradio.Upload); isFile {
			return []any{fileArg(x)}, nil
		}
		kw := gradio.Kwargs{}
		for k, e := range x {
			kw[k] = fileArg(e)
		}
		return []any{kw}, nil
	default:
		return []any{fileArg(v)}, nil
	}
}

// fileArg maps the command line's file conventions to uploads.
func fileArg(v any) any {
	switch x := v.(type) {
	case string:
		if p, ok := strings.CutPrefix(x, "@"); ok && p != "" {
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return gradio.File(p)
			}
		}
	case map[string]any:
		p, ok := x["path"].(string)
		if !ok || x["meta"] != nil || len(x) > 2 {
			return v
		}
		if strings.HasPrefix(p, "http://") || strings.HasPrefix(p, "https://") {
			return gradio.FileURL(p)
		}
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return gradio.File(p)
		}
	}
	return v
}

// saveFiles downloads FileData outputs into dir (when set and final) and
// replaces them with their local path.
func saveFiles(ctx context.Context, c *gradio.Client, data []json.RawMessage, dir string, final bool) ([]json.RawMessage, error) {
	if dir == "" || !final {
		return data, nil
	}
	out := make([]json.RawMessage, len(data))
	for i, raw := range data {
		out[i] = raw
		if !gradio.IsFileData(raw) {
			continue
		}
		fd, err := gradio.ParseFileData(raw)
		if err != nil {
			continue
		}
		name := fd.OrigName
		if name == "" {
			name = lastElem(fd.Path)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		f, err := os.CreateTemp(dir, "*-"+sanitize(name))
		if err != nil {
			return nil, err
		}
		err = c.Download(ctx, fd, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(f.Name())
		out[i] = b
	}
	return out, nil
}

func lastElem(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}

func sanitize(name string) string {
	var b bytes.Buffer
	for _, r := range name {
		if r == '/' || r == '\\' || r == '*' || r < ' ' {
			r = '_'
		}
		b.WriteRune(r)
	}
	if b.Len() == 0 {
		return "file"
	}
	return b.String()
}

// headerFlags collects repeated --header KEY=VALUE.
type headerFlags [][2]string

func (h *headerFlags) String() string {
	var keys []string
	for _, kv := range *h {
		keys = append(keys, kv[0]+"=...")
	}
	return strings.Join(keys, ",")
}

func (h *headerFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	*h = append(*h, [2]string{k, v})
	return nil
}

// listEndpoints prints one line per callable endpoint:
// "/upper(text: str) -> [str]   fn_index 0".
func listEndpoints(ctx context.Context, c *gradio.Client, w io.Writer) error {
	info, err := c.APIInfo(ctx)
	if err != nil {
		return err
	}
	cfg := c.Config()
	for i := range cfg.Dependencies {
		d := &cfg.Dependencies[i]
		if !d.Callable() {
			continue
		}
		name := gradio.FnIndex(d.FnIndex)
		if d.APIName != "" {
			name = "/" + d.APIName
		}
		var params, returns []string
		if ei := info.Endpoint(d); ei != nil {
			for _, p := range ei.Parameters {
				ps := p.Name() + ": " + p.PythonType.Type
				if p.HasDefault {
					ps += " = " + string(p.Default)
				}
				params = append(params, ps)
			}
			for _, r := range ei.Returns {
				returns = append(returns, r.PythonType.Type)
			}
		}
		extra := ""
		if d.Generator {
			extra = "  generator"
		}
		if d.Undocumented {
			extra += "  undocumented"
		}
		fmt.Fprintf(w, "%s(%s) -> [%s]  fn_index %d%s\n", name, strings.Join(params, ", "), strings.Join(returns, ", "), d.FnIndex, extra)
	}
	return nil
}
