package gradio_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// collect drains a job's events.
func collect(t testing.TB, j *gradio.Job) []gradio.Event {
	t.Helper()
	var evs []gradio.Event
	for ev := range j.Events() {
		evs = append(evs, ev)
	}
	return evs
}

func outputs(t testing.TB, evs []gradio.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Kind == gradio.EventOutput {
			out = append(out, str(t, ev.Data[0]))
		}
	}
	return out
}

func TestSubmitEventsAllModes(t *testing.T) {
	for _, mode := range gradiotest.Modes {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, nil)
			c := connect(t, srv.URL)
			ctx := testCtx(t)
			j, err := c.Submit(ctx, "/count", 4)
			if err != nil {
				t.Fatal(err)
			}
			evs := collect(t, j)
			kinds := map[gradio.EventKind]int{}
			for _, ev := range evs {
				kinds[ev.Kind]++
			}
			if kinds[gradio.EventQueued] == 0 || kinds[gradio.EventStarted] != 1 || kinds[gradio.EventCompleted] != 1 {
				t.Errorf("event kinds %v", kinds)
			}
			if last := evs[len(evs)-1]; last.Kind != gradio.EventCompleted || str(t, last.Data[0]) != "0 1 2 3" {
				t.Errorf("last event %+v", last)
			}
			if got, want := outputs(t, evs), []string{"0", "0 1", "0 1 2", "0 1 2 3"}; !reflect.DeepEqual(got, want) {
				t.Errorf("partial outputs %q, want %q", got, want)
			}
			out, err := j.Wait(ctx)
			if err != nil || str(t, out[0]) != "0 1 2 3" {
				t.Errorf("Wait = %s, %v", out, err)
			}
			if st := j.Status(); st.Kind != gradio.EventCompleted {
				t.Errorf("Status %v", st.Kind)
			}
			if outs := j.Outputs(); len(outs) != 5 || str(t, outs[4][0]) != "0 1 2 3" {
				t.Errorf("Outputs %v", outs)
			}
			if j.ID() == "" {
				t.Error("no event id")
			}
		})
	}
}

// chatApp streams a chat history (nested lists and dicts) so that diffs
// with nested paths, appends and adds are exercised.
func chatApp() *gradiotest.App {
	app := gradiotest.NewApp()
	steps := []any{
		[]any{[]any{"hi", ""}},
		[]any{[]any{"hi", "Hel"}},
		[]any{[]any{"hi", "Hello"}, []any{"how?", nil}},
		[]any{[]any{"hi", "Hello"}, []any{"how?", "fine"}},
		[]any{map[string]any{"role": "assistant", "content": "x", "metadata": map[string]any{"title": nil}}},
		[]any{},
	}
	app.HandleGenerator("chat", func(ctx context.Context, c *gradiotest.Call, yield func(...any) error) error {
		c.Log("info", "thinking")
		c.Progress(1, 2, "steps", "half way")
		for _, s := range steps {
			if err := yield(s); err != nil {
				return err
			}
		}
		return nil
	}, []gradiotest.Component{gradiotest.Textbox("q")}, []gradiotest.Component{gradiotest.JSON("history")})
	app.Handle("kw", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		var vals []any
		for i := range c.Inputs {
			var v any
			if err := c.Decode(i, &v); err != nil {
				return nil, err
			}
			vals = append(vals, v)
		}
		return []any{vals}, nil
	}, []gradiotest.Component{
		{Type: "textbox", Label: "a"},
		{Type: "number", Label: "B", ParameterName: "b", Default: 7, HasDefault: true},
		{Type: "json", Label: "c", Default: map[string]any{"k": "v"}, HasDefault: true},
	}, []gradiotest.Component{gradiotest.JSON("out")})
	app.Handle("oops", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		return nil, errors.New("plain exception")
	}, nil, nil)
	app.Handle("hidden", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		return nil, nil
	}, nil, nil).Private = true
	return app
}

func TestDiffsLogProgressAllModes(t *testing.T) {
	want := []string{
		`[["hi",""]]`, `[["hi","Hel"]]`, `[["hi","Hello"],["how?",null]]`, `[["hi","Hello"],["how?","fine"]]`,
		`[{"content":"x","metadata":{"title":null},"role":"assistant"}]`, `[]`,
	}
	for _, mode := range gradiotest.Modes {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, chatApp(), nil)
			c := connect(t, srv.URL)
			j, err := c.Submit(testCtx(t), "chat", "q")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			var logs, progress int
			for ev := range j.Events() {
				switch ev.Kind {
				case gradio.EventOutput:
					got = append(got, canon(t, ev.Data[0]))
				case gradio.EventLog:
					logs++
					if ev.Log != "thinking" || ev.Level != "info" {
						t.Errorf("log event %+v", ev)
					}
				case gradio.EventProgress:
					progress++
					if len(ev.Progress) != 1 || ev.Progress[0].Desc != "half way" {
						t.Errorf("progress event %+v", ev)
					}
				case gradio.EventCompleted:
					if canon(t, ev.Data[0]) != want[len(want)-1] {
						t.Errorf("final %s", ev.Data[0])
					}
				case gradio.EventError:
					t.Fatalf("error event: %v", ev.Err)
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("outputs\n got %q\nwant %q", got, want)
			}
			if logs != 1 || progress != 1 {
				t.Errorf("logs %d progress %d", logs, progress)
			}
		})
	}
}

func canon(t testing.TB, raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("bad JSON %s", raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestArguments(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio6, chatApp(), nil)
	srvDefault := startSim(t, gradiotest.Gradio5, nil, nil)
	c := connect(t, srv.URL)
	cd := connect(t, srvDefault.URL)
	ctx := testCtx(t)
	tests := []struct {
		name    string
		client  *gradio.Client
		ep      string
		args    []any
		want    string
		wantErr error
		argErr  bool
	}{
		{"positional", c, "kw", []any{"x", 1, []any{2}}, `[["x",1,[2]]]`, nil, false},
		{"defaults", c, "kw", []any{"x"}, `[["x",7,{"k":"v"}]]`, nil, false},
		{"kwargs", c, "kw", []any{gradio.Kwargs{"a": "y", "c": 3}}, `[["y",7,3]]`, nil, false},
		{"positional+kwargs", c, "/kw", []any{"z", gradio.Kwargs{"b": 2}}, `[["z",2,{"k":"v"}]]`, nil, false},
		{"fn_index", c, gradio.FnIndex(1), []any{"x", 1, 2}, `[["x",1,2]]`, nil, false},
		{"too many", c, "kw", []any{1, 2, 3, 4}, "", nil, true},
		{"missing required", c, "kw", []any{gradio.Kwargs{"b": 1}}, "", nil, true},
		{"unknown kwarg", c, "kw", []any{gradio.Kwargs{"a": 1, "zz": 1}}, "", nil, true},
		{"both", c, "kw", []any{"x", gradio.Kwargs{"a": 1}}, "", nil, true},
		{"unknown endpoint", c, "/nope", nil, "", gradio.ErrUnknownEndpoint, false},
		{"private", c, "hidden", []any{"x"}, "", gradio.ErrUnknownEndpoint, false},
		{"bad fn_index", c, "#99", nil, "", gradio.ErrUnknownEndpoint, false},
		{"count default", cd, "count", nil, `["0 1 2 3 4"]`, nil, false},
		{"state by kwargs", cd, "counter", []any{gradio.Kwargs{"text": "a"}}, `["1 items: a"]`, nil, false},
		{"state too many", cd, "counter", []any{"a", "b"}, "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := srv.Executions("kw")
			out, err := tt.client.Predict(ctx, tt.ep, tt.args...)
			switch {
			case tt.argErr:
				var ae *gradio.ArgumentError
				if !errors.As(err, &ae) {
					t.Fatalf("err %v, want *ArgumentError", err)
				}
				if srv.Executions("kw") != before {
					t.Error("the call ran anyway")
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				b, _ := json.Marshal(out)
				if canon(t, b) != tt.want {
					t.Fatalf("got %s, want %s", b, tt.want)
				}
			}
		})
	}
}

func TestAppErrors(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, chatApp(), nil)
	c := connect(t, srv.URL)
	_, err := c.Predict(testCtx(t), "oops", "x")
	var ae *gradio.AppError
	if !errors.As(err, &ae) {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(ae.Message, "plain exception") && !ae.Hidden {
		t.Errorf("message %q", ae.Message)
	}
	srv2 := startSim(t, gradiotest.Gradio5, nil, nil)
	c2 := connect(t, srv2.URL)
	_, err = c2.Predict(testCtx(t), "fail", "boom")
	if !errors.As(err, &ae) || ae.Message != "deliberate failure for input 'boom'" || ae.Title != "Error" || ae.Duration != 10*time.Second || !ae.Visible {
		t.Fatalf("err %#v", err)
	}
}

func TestConcurrentCallsShareOneStream(t *testing.T) {
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio4SSEv2, gradiotest.Gradio4SSEv1, gradiotest.Gradio4SSE} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, func(s *gradiotest.Server) { s.DefaultConcurrencyLimit = -1 })
			var streams countingProxy
			c := connect(t, streams.start(t, srv.URL))
			ctx := testCtx(t)
			const n = 20
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					if i%2 == 0 {
						out, err := c.Predict(ctx, "upper", fmt.Sprintf("call %d", i))
						if err == nil && str(t, out[0]) != fmt.Sprintf("CALL %d", i) {
							err = fmt.Errorf("call %d got %s", i, out[0])
						}
						errs <- err
						return
					}
					out, err := c.Predict(ctx, "count", 3)
					if err == nil && str(t, out[0]) != "0 1 2" {
						err = fmt.Errorf("count got %s", out[0])
					}
					errs <- err
				}(i)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			t.Logf("requests: %v", streams.snapshot())
		})
	}
}

// countingProxy is a reverse proxy that counts requests per path and
// records headers.
type countingProxy struct {
	mu      sync.Mutex
	counts  map[string]int
	headers map[string]http.Header
}

func (p *countingProxy) start(t testing.TB, target string) string {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.Transport = proxyTransport(t)
	p.counts = map[string]int{}
	p.headers = map[string]http.Header{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.Path
		p.mu.Lock()
		p.counts[key]++
		p.headers[key] = r.Header.Clone()
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (p *countingProxy) snapshot() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for k, v := range p.counts {
		m[k] = v
	}
	return m
}

func (p *countingProxy) header(key string) http.Header {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.headers[key]
}

func TestHeadersAndNewSession(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, nil)
	var px countingProxy
	base := px.start(t, srv.URL)
	c := connect(t, base, gradio.WithHFToken("hf_secret"), gradio.WithHeader("X-Ip-Token", "ip123"))
	ctx := testCtx(t)
	if got := px.snapshot(); len(got) != 1 || got["GET /config"] != 1 {
		t.Fatalf("connect made requests %v, want only GET /config", got)
	}
	before := px.snapshot()
	s2 := c.NewSession()
	defer s2.Close()
	if !reflect.DeepEqual(px.snapshot(), before) {
		t.Fatal("NewSession made a request")
	}
	if s2.SessionHash() == c.SessionHash() {
		t.Fatal("same session hash")
	}
	for _, cl := range []*gradio.Client{c, c, s2} {
		if _, err := cl.Predict(ctx, "counter", "x"); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := s2.Predict(ctx, "counter", "y")
	if str(t, out[0]) != "2 items: x, y" {
		t.Errorf("session state leaked: %s", out[0])
	}
	h := px.header("POST /gradio_api/queue/join")
	if h.Get("Authorization") != "Bearer hf_secret" || h.Get("X-Ip-Token") != "ip123" || h.Get("X-Gradio-User") != "api" {
		t.Errorf("join headers %v", h)
	}
	if h := px.header("GET /gradio_api/queue/data"); h.Get("Authorization") != "Bearer hf_secret" {
		t.Errorf("stream headers %v", h)
	}
	for _, s := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%+v", *c.Config())} {
		if strings.Contains(s, "hf_secret") {
			t.Errorf("token leaked: %s", s)
		}
	}
}

func TestCancel(t *testing.T) {
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio4SSEv3, gradiotest.Gradio4SSE} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, nil)
			c := connect(t, srv.URL)
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			j, err := c.Submit(ctx, "slow", 1000) // 10 s at TimeScale 0.01
			if err != nil {
				t.Fatal(err)
			}
			var last gradio.Event
			for ev := range j.Events() {
				if ev.Kind == gradio.EventStarted {
					cancel()
				}
				last = ev
			}
			if last.Kind != gradio.EventError || !errors.Is(last.Err, context.Canceled) {
				t.Errorf("last event %v %v, want the ctx error", last.Kind, last.Err)
			}
			if _, err := j.Wait(testCtx(t)); !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait: %v", err)
			}
			// The server-side job ends: a next call on the same session runs.
			out, err := c.Predict(testCtx(t), "upper", "after")
			if err != nil || str(t, out[0]) != "AFTER" {
				t.Fatalf("after cancel: %s %v", out, err)
			}
			waitFor(t, func() bool { return srv.Snapshot().Running == 0 })

			j, err = c.Submit(testCtx(t), "slow", 1000)
			if err != nil {
				t.Fatal(err)
			}
			if err := j.Cancel(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			if _, err := j.Wait(testCtx(t)); !errors.Is(err, gradio.ErrCanceled) {
				t.Fatalf("Wait after Cancel: %v", err)
			}
			waitFor(t, func() bool { return srv.Snapshot().Running == 0 })
		})
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not reached")
}

func TestClosePendingJobs(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, nil)
	c := connect(t, srv.URL)
	j, err := c.Submit(testCtx(t), "slow", 1000)
	if err != nil {
		t.Fatal(err)
	}
	ev := j.Events()
	c.Close()
	if _, err := j.Wait(testCtx(t)); !errors.Is(err, gradio.ErrClosed) {
		t.Fatalf("Wait: %v", err)
	}
	for range ev {
	}
	if _, err := c.Predict(testCtx(t), "upper", "x"); !errors.Is(err, gradio.ErrClosed) {
		t.Fatalf("Predict after Close: %v", err)
	}
	c.Close()
}

func TestFilesAllModes(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(p, []byte("hello file payload\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range gradiotest.Modes {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, nil)
			c := connect(t, srv.URL)
			ctx := testCtx(t)
			for _, arg := range []any{gradio.File(p), gradio.FileReader("r.txt", strings.NewReader("hello file payload\n"))} {
				out, err := c.Predict(ctx, "reverse_file", arg)
				if err != nil {
					t.Fatal(err)
				}
				fd, err := gradio.ParseFileData(out[0])
				if err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				if err := c.Download(ctx, fd, &buf); err != nil {
					t.Fatal(err)
				}
				if buf.String() != "\ndaolyap elif olleh" {
					t.Errorf("downloaded %q", buf.String())
				}
			}
		})
	}
}

func TestMaxFileSize(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, func(s *gradiotest.Server) { s.MaxFileSize = 10 })
	var px countingProxy
	c := connect(t, px.start(t, srv.URL))
	if got := c.Config().MaxFileSize; got != 10 {
		t.Fatalf("MaxFileSize %d", got)
	}
	p := filepath.Join(t.TempDir(), "big.bin")
	os.WriteFile(p, make([]byte, 20), 0o600)
	ctx := testCtx(t)
	for _, arg := range []any{gradio.File(p), gradio.FileReader("big", io.MultiReader(bytes.NewReader(make([]byte, 20))))} {
		_, err := c.Predict(ctx, "reverse_file", arg)
		var tl *gradio.UploadTooLargeError
		if !errors.As(err, &tl) || tl.Max != 10 {
			t.Fatalf("err %v, want *UploadTooLargeError", err)
		}
	}
	if n := px.snapshot()["POST /gradio_api/queue/join"]; n != 0 {
		t.Errorf("%d joins", n)
	}
	if _, err := c.Predict(ctx, "reverse_file", gradio.FileReader("small", strings.NewReader("abc"))); err != nil {
		t.Fatal(err)
	}
}

func TestPingAppChanged(t *testing.T) {
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio4SSEv1} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, nil)
			c := connect(t, srv.URL)
			if err := c.Ping(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			if c.Config().AppID != srv.AppIDValue() {
				t.Fatalf("app id %d vs %d", c.Config().AppID, srv.AppIDValue())
			}
			srv.Restart()
			if err := c.Ping(testCtx(t)); !errors.Is(err, gradio.ErrAppChanged) {
				t.Fatalf("Ping after restart: %v", err)
			}
		})
	}
}

func TestFaults(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, nil)
	ctx := testCtx(t)

	srv.FailNextConfigs(1)
	_, err := gradio.Connect(ctx, srv.URL)
	var me *gradio.MetadataError
	if !errors.As(err, &me) || me.StatusCode != 500 {
		t.Fatalf("config fault: %v", err)
	}
	c := connect(t, srv.URL)

	srv.SetQueueFull(true)
	_, err = c.Predict(ctx, "upper", "x")
	if !errors.Is(err, gradio.ErrQueueFull) {
		t.Fatalf("queue full: %v", err)
	}
	srv.SetQueueFull(false)

	// Any other 503 (a sleeping or crashed Space) is not load: a pool must
	// be able to tell it from a full queue.
	srv.Sleep(time.Hour)
	_, err = c.Predict(ctx, "upper", "x")
	var asleep *gradio.ProtocolError
	if errors.Is(err, gradio.ErrQueueFull) || !errors.As(err, &asleep) || asleep.StatusCode != 503 {
		t.Fatalf("asleep: %v", err)
	}
	srv.Wake()

	srv.FailNextJoins(1)
	_, err = c.Predict(ctx, "upper", "x")
	var pe *gradio.ProtocolError
	if !errors.As(err, &pe) || pe.StatusCode != 500 {
		t.Fatalf("join fault: %v", err)
	}
	if srv.Executions("upper") != 0 {
		t.Fatal("ran")
	}

	srv.CutNextStreams(1)
	_, err = c.Predict(ctx, "slow", 10)
	var cl *gradio.ConnectionLostError
	if !errors.As(err, &cl) || !cl.Accepted || cl.EventID == "" {
		t.Fatalf("cut stream: %v", err)
	}
	if out, err := c.Predict(ctx, "upper", "ok"); err != nil || str(t, out[0]) != "OK" {
		t.Fatalf("after cut: %v", err)
	}
}

func TestIdleTimeout(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, func(s *gradiotest.Server) { s.HeartbeatInterval = time.Hour })
	c := connect(t, srv.URL, gradio.WithStreamGapTimeout(200*time.Millisecond))
	_, err := c.Predict(testCtx(t), "slow", 300) // 3 s
	var cl *gradio.ConnectionLostError
	if !errors.As(err, &cl) || !cl.Accepted {
		t.Fatalf("err %v", err)
	}
}

func TestConnectErrors(t *testing.T) {
	ctx := testCtx(t)
	srv := startSim(t, gradiotest.Gradio5, nil, nil)
	srv.SetStall(true)
	_, err := gradio.Connect(ctx, srv.URL, gradio.WithHeaderTimeout(300*time.Millisecond))
	var ce *gradio.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("stall: %v", err)
	}
	srv.SetStall(false)

	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	if _, err := gradio.Connect(ctx, deadURL); !errors.As(err, &ce) {
		t.Fatalf("refused: %v", err)
	}
	if _, err := gradio.Connect(ctx, "not a src"); err == nil {
		t.Fatal("bad src accepted")
	}
	nf := httptest.NewServer(http.NotFoundHandler())
	defer nf.Close()
	var me *gradio.MetadataError
	if _, err := gradio.Connect(ctx, nf.URL); !errors.As(err, &me) || !errors.Is(err, gradio.ErrNotFound) {
		t.Fatalf("404: %v", err)
	}
}

func TestLogin(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, func(s *gradiotest.Server) { s.Username, s.Password = "u", "pw-secret" })
	ctx := testCtx(t)
	_, err := gradio.Connect(ctx, srv.URL)
	if !errors.Is(err, gradio.ErrUnauthorized) {
		t.Fatalf("no login: %v", err)
	}
	_, err = gradio.Connect(ctx, srv.URL, gradio.WithLogin("u", "wrong-pw"))
	if !errors.Is(err, gradio.ErrLoginFailed) || strings.Contains(err.Error(), "wrong-pw") {
		t.Fatalf("bad login: %v", err)
	}
	c := connect(t, srv.URL, gradio.WithLogin("u", "pw-secret"))
	s2 := c.NewSession()
	defer s2.Close()
	out, err := s2.Predict(ctx, "upper", "in")
	if err != nil || str(t, out[0]) != "IN" {
		t.Fatalf("after login: %v", err)
	}
}

func TestQueueFullAllModes(t *testing.T) {
	for _, mode := range gradiotest.Modes {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, func(s *gradiotest.Server) { s.QueueFull = true })
			c := connect(t, srv.URL)
			_, err := c.Predict(testCtx(t), "upper", "x")
			if !errors.Is(err, gradio.ErrQueueFull) {
				t.Fatalf("err %v", err)
			}
			if srv.Executions("upper") != 0 {
				t.Fatal("ran")
			}
		})
	}
}

func TestNoSecretsInLogs(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, func(s *gradiotest.Server) { s.Username, s.Password = "u", "pw-top-secret" })
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := connect(t, srv.URL, gradio.WithHFToken("hf_top_secret"), gradio.WithLogin("u", "pw-top-secret"), gradio.WithLogger(logger))
	logger.Info("client", "c", c)
	if _, err := c.Predict(testCtx(t), "upper", "x"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	for _, secret := range []string{"hf_top_secret", "pw-top-secret"} {
		if strings.Contains(buf.String(), secret) {
			t.Errorf("log contains %s:\n%s", secret, buf.String())
		}
	}
	if !strings.Contains(buf.String(), "session=") {
		t.Errorf("LogValue not used: %s", buf.String())
	}
}

// TestConnectionReuse checks that 50 parallel sessions of one app reuse
// keep-alive connections: a second wave of parallel calls opens (almost)
// no new TCP connections. Go's default of 2 idle connections per host
// would open about a hundred.
func TestConnectionReuse(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, func(s *gradiotest.Server) { s.DefaultConcurrencyLimit = -1 })
	u, _ := url.Parse(srv.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.Transport = proxyTransport(t)
	var mu sync.Mutex
	conns := 0
	front := httptest.NewUnstartedServer(rp)
	front.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	front.Start()
	defer front.Close()
	c := connect(t, front.URL, gradio.WithHeartbeat(false))
	sessions := make([]*gradio.Client, 50)
	for i := range sessions {
		sessions[i] = c.NewSession()
		defer sessions[i].Close()
	}
	wave := func() {
		var wg sync.WaitGroup
		for _, s := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Predict(testCtx(t), "slow", 5); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	// Later waves also open each stream while the join is in flight, so
	// they need up to two connections per session; from the third wave on
	// the idle pool has them all.
	var opened []int
	for i := 0; i < 4; i++ {
		mu.Lock()
		before := conns
		mu.Unlock()
		wave()
		mu.Lock()
		opened = append(opened, conns-before)
		mu.Unlock()
	}
	t.Logf("new connections per wave: %v", opened)
	if opened[3] > 20 {
		t.Errorf("fourth wave opened %d new connections", opened[3])
	}
}

func TestOptionsHTTPClientEagerInfo(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio6, nil, nil)
	var px countingProxy
	base := px.start(t, srv.URL)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer hc.CloseIdleConnections()
	c := connect(t, base, gradio.WithHTTPClient(hc), gradio.WithEagerInfo())
	got := px.snapshot()
	if got["GET /config"] != 1 || got["GET /gradio_api/info"] != 1 {
		t.Fatalf("connect requests %v", got)
	}
	info, err := c.APIInfo(testCtx(t))
	if err != nil || info.Named["/count"] == nil || !info.Named["/count"].Parameters[0].HasDefault {
		t.Fatalf("info %v %v", info, err)
	}
	if _, err := c.Predict(testCtx(t), "count"); err != nil { // default from the cached info
		t.Fatal(err)
	}
	if n := px.snapshot()["GET /gradio_api/info"]; n != 1 {
		t.Errorf("/info fetched %d times", n)
	}
}

// TestLongCallOutlivesPhaseTimeouts: a call much longer than the header
// time-out and the idle time-out completes, because heartbeats keep the
// stream alive and no global deadline applies.
func TestLongCallOutlivesPhaseTimeouts(t *testing.T) {
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio4SSEv1} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, func(s *gradiotest.Server) { s.HeartbeatInterval = 50 * time.Millisecond })
			c := connect(t, srv.URL, gradio.WithHeaderTimeout(300*time.Millisecond), gradio.WithStreamGapTimeout(400*time.Millisecond))
			out, err := c.Predict(testCtx(t), "slow", 150) // 1.5 s at TimeScale 0.01
			if err != nil || str(t, out[0]) != "slept 150.00s" {
				t.Fatalf("%s %v", out, err)
			}
		})
	}
}
