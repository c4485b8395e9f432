package gradiotest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

func TestConfig(t *testing.T) {
	s := newServer(t, nil)
	for _, path := range []string{"/config", "/config/"} {
		st, hdr, b := do(t, "GET", s.URL+path, "", nil)
		if st != 200 || hdr.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %s", path, st, hdr.Get("Content-Type"))
		}
		var c struct {
			Version          string `json:"version"`
			APIPrefix        string `json:"api_prefix"`
			Protocol         string `json:"protocol"`
			AppID            uint64 `json:"app_id"`
			Root             string `json:"root"`
			EnableQueue      bool   `json:"enable_queue"`
			ConnectHeartbeat bool   `json:"connect_heartbeat"`
			Components       []struct {
				ID      int    `json:"id"`
				Type    string `json:"type"`
				SkipAPI bool   `json:"skip_api"`
			} `json:"components"`
			Dependencies []struct {
				ID        int    `json:"id"`
				APIName   string `json:"api_name"`
				Inputs    []int  `json:"inputs"`
				Outputs   []int  `json:"outputs"`
				BackendFn bool   `json:"backend_fn"`
				Types     struct {
					Generator bool `json:"generator"`
				} `json:"types"`
				ShowAPI    *bool  `json:"show_api"`
				Connection string `json:"connection"`
			} `json:"dependencies"`
		}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		if c.Version != "5.49.1" || c.APIPrefix != "/gradio_api" || c.Protocol != "sse_v3" || !c.EnableQueue || !c.ConnectHeartbeat {
			t.Errorf("config header fields: %+v", c)
		}
		if c.AppID < 1<<63 || c.AppID != s.AppIDValue() {
			t.Errorf("app_id %d: want >= 2^63 and %d", c.AppID, s.AppIDValue())
		}
		if c.Root != s.URL {
			t.Errorf("root %q, want %q", c.Root, s.URL)
		}
		var names []string
		for i, d := range c.Dependencies {
			if d.ID != i || !d.BackendFn || d.ShowAPI == nil || !*d.ShowAPI || d.Connection != "sse" {
				t.Errorf("dependency %d: %+v", i, d)
			}
			names = append(names, d.APIName)
		}
		if want := []string{"upper", "count", "slow", "counter", "fail", "reverse_file"}; !slices.Equal(names, want) {
			t.Errorf("api names %v, want %v", names, want)
		}
		if !c.Dependencies[1].Types.Generator || c.Dependencies[0].Types.Generator {
			t.Errorf("generator flags wrong")
		}
		counter := c.Dependencies[3]
		if len(counter.Inputs) != 2 || counter.Inputs[1] != counter.Outputs[1] {
			t.Errorf("counter state is not shared between input and output: %v %v", counter.Inputs, counter.Outputs)
		}
		found := false
		for _, comp := range c.Components {
			if comp.ID == counter.Inputs[1] {
				found = comp.Type == "state" && comp.SkipAPI
			}
		}
		if !found {
			t.Errorf("no state component with skip_api")
		}
		wantKeys := []string{"version", "api_prefix", "mode", "app_id"}
		if got := keys(t, b)[:4]; !slices.Equal(got, wantKeys) {
			t.Errorf("config starts with %v, want %v", got, wantKeys)
		}
	}
	// root follows X-Forwarded-Host/Proto
	req, _ := http.NewRequest("GET", s.URL+"/config", nil)
	req.Header.Set("X-Forwarded-Host", "owner-space.hf.space")
	req.Header.Set("X-Forwarded-Proto", "https")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Root string }
	_ = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if c.Root != "https://owner-space.hf.space" {
		t.Errorf("forwarded root %q", c.Root)
	}
	var a struct {
		AppID uint64 `json:"app_id"`
	}
	if getJSON(t, api(s)+"/app_id", &a); a.AppID != s.AppIDValue() {
		t.Errorf("app_id route %d", a.AppID)
	}
}

func TestInfo(t *testing.T) {
	s := newServer(t, nil)
	st, _, b := do(t, "GET", api(s)+"/info", "", nil)
	if st != 200 {
		t.Fatal(st)
	}
	var info struct {
		Named map[string]struct {
			Parameters []map[string]any `json:"parameters"`
			Returns    []map[string]any `json:"returns"`
			ShowAPI    bool             `json:"show_api"`
		} `json:"named_endpoints"`
		Unnamed map[string]any `json:"unnamed_endpoints"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	if len(info.Named) != 6 || info.Unnamed == nil {
		t.Fatalf("named endpoints: %v", info.Named)
	}
	counter := info.Named["/counter"]
	if len(counter.Parameters) != 1 || counter.Parameters[0]["parameter_name"] != "text" || counter.Parameters[0]["label"] != "item" {
		t.Errorf("counter parameters (State must be omitted): %v", counter.Parameters)
	}
	if len(counter.Returns) != 1 {
		t.Errorf("counter returns: %v", counter.Returns)
	}
	count := info.Named["/count"].Parameters[0]
	if count["parameter_has_default"] != true || count["parameter_default"] != 5.0 || count["component"] != "Number" {
		t.Errorf("count parameter: %v", count)
	}
	p := info.Named["/upper"].Parameters[0]
	var ks []string
	for k := range p {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	want := []string{"component", "example_input", "label", "parameter_default", "parameter_has_default", "parameter_name", "python_type", "type"}
	if !slices.Equal(ks, want) {
		t.Errorf("parameter keys %v, want %v", ks, want)
	}
	if f := info.Named["/reverse_file"].Parameters[0]; f["python_type"].(map[string]any)["type"] != "filepath" {
		t.Errorf("file parameter: %v", f)
	}
}

func TestQueueMessageShapes(t *testing.T) {
	s := newServer(t, nil)
	id := join(t, s, "sess1", 0, "hello gradio")
	recs := stream(t, data(s, "sess1"))
	if got, want := msgs(recs), []string{"estimation", "process_starts", "process_completed", "close_stream"}; !slices.Equal(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	wantKeys := map[string][]string{
		"estimation":        {"msg", "event_id", "rank", "queue_size", "rank_eta"},
		"process_starts":    {"msg", "event_id", "eta"},
		"process_completed": {"msg", "event_id", "output", "success", "title"},
		"close_stream":      {"msg", "event_id"},
	}
	for _, r := range recs {
		if got := keys(t, r.data); !slices.Equal(got, wantKeys[r.msg()]) {
			t.Errorf("%s keys %v, want %v", r.msg(), got, wantKeys[r.msg()])
		}
		if r.msg() != "close_stream" && r.m["event_id"] != id {
			t.Errorf("%s event_id %v", r.msg(), r.m["event_id"])
		}
	}
	est := recs[0].m
	if est["rank"] != 0.0 || est["queue_size"] != 1.0 || est["rank_eta"] != nil {
		t.Errorf("estimation %v", est)
	}
	out := field(t, recs[2].data, "output")
	if got, want := keys(t, out), []string{"data", "is_generating", "duration", "average_duration", "render_config", "changed_state_ids"}; !slices.Equal(got, want) {
		t.Errorf("output keys %v", got)
	}
	if d := string(field(t, out, "data")); d != `["HELLO GRADIO"]` {
		t.Errorf("data %s", d)
	}
	if recs[2].m["success"] != true || recs[2].m["title"] != nil {
		t.Errorf("completion %s", recs[2].data)
	}
	// second run: rank_eta and eta are now the average duration
	join(t, s, "sess1", 0, "again")
	recs = stream(t, data(s, "sess1"))
	if recs[0].m["rank_eta"] == nil || recs[1].m["eta"] == nil {
		t.Errorf("second run has no ETA: %s %s", recs[0].data, recs[1].data)
	}
	if s.Executions("upper") != 2 || s.Executions("/upper") != 2 {
		t.Errorf("executions %d", s.Executions("upper"))
	}
}

func TestGeneratorDiffs(t *testing.T) {
	s := newServer(t, nil)
	join(t, s, "g", 1, 4)
	recs := stream(t, data(s, "g"))
	var gen []string
	var final string
	for _, r := range recs {
		out := field(t, r.data, "output")
		switch r.msg() {
		case "process_generating":
			gen = append(gen, string(field(t, out, "data")))
			if got := keys(t, r.data); !slices.Equal(got, []string{"msg", "event_id", "output", "success", "time_limit"}) {
				t.Errorf("generating keys %v", got)
			}
			if string(field(t, out, "is_generating")) != "true" {
				t.Errorf("is_generating not true")
			}
		case "process_completed":
			final = string(field(t, out, "data"))
		}
	}
	want := []string{`["0"]`, `[[["append",[]," 1"]]]`, `[[["append",[]," 2"]]]`, `[[["append",[]," 3"]]]`}
	if !slices.Equal(gen, want) {
		t.Errorf("generating data\n got %v\nwant %v", gen, want)
	}
	if final != `["0 1 2 3"]` {
		t.Errorf("final %s", final)
	}
}

func TestDiff(t *testing.T) {
	cases := []struct{ name, old, new, want string }{
		{"append", `"Hello"`, `"Hello, w"`, `[["append",[],", w"]]`},
		{"equal", `"a"`, `"a"`, `[]`},
		{"replace string", `"abc"`, `"xbc"`, `[["replace",[],"xbc"]]`},
		{"type change", `1`, `"1"`, `[["replace",[],"1"]]`},
		{"int float equal", `1`, `1.0`, `[]`},
		{"int to float", `1`, `1.5`, `[["replace",[],1.5]]`},
		{"chat append", `[["How are you?","I am"]]`, `[["How are you?","I am fine"]]`, `[["append",[0,1]," fine"]]`},
		{"dict add", `[{"role":"assistant","content":"Hi"}]`, `[{"role":"assistant","content":"Hi there","metadata":{"title":null}}]`,
			`[["append",[0,"content"]," there"],["add",[0,"metadata"],{"title":null}]]`},
		{"list add", `[1]`, `[1,2,3]`, `[["add",[1],2],["add",[2],3]]`},
		{"list shrink renumbered", `[1,2,3,4,5]`, `[1,2,3]`, `[["delete",[3],null],["delete",[3],null]]`},
		{"nested delete quirk", `[[1,2,3]]`, `[[1]]`, `[["delete",[0,1],null],["delete",[0,0],null]]`},
		{"dict delete", `{"a":1,"b":2}`, `{"a":1}`, `[["delete",["b"],null]]`},
		{"null to value", `null`, `"x"`, `[["replace",[],"x"]]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := gradiotest.DiffForTest(c.old, c.new); got != c.want {
				t.Errorf("diff(%s, %s) = %s, want %s", c.old, c.new, got, c.want)
			}
		})
	}
}

func TestPythonJSON(t *testing.T) {
	got := gradiotest.PythonJSONForTest(`{"msg":"a, b: c","x":[1,2],"u":"é😀"}`)
	want := `{"msg": "a, b: c", "x": [1, 2], "u": "\u00e9\ud83d\ude00"}`
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestStatePerSession(t *testing.T) {
	s := newServer(t, nil)
	run := func(session, item string) string {
		join(t, s, session, 3, item, nil)
		for _, r := range stream(t, data(s, session)) {
			if r.msg() == "process_completed" {
				return string(field(t, field(t, r.data, "output"), "data"))
			}
		}
		return ""
	}
	if got := run("a", "apple"); got != `["1 items: apple",null]` {
		t.Errorf("first %s", got)
	}
	if got := run("a", "banana"); got != `["2 items: apple, banana",null]` {
		t.Errorf("second %s", got)
	}
	if got := run("b", "cherry"); got != `["1 items: cherry",null]` {
		t.Errorf("other session %s", got)
	}
}

func TestFailIsGrError(t *testing.T) {
	s := newServer(t, nil)
	join(t, s, "f", 4, "boom")
	recs := stream(t, data(s, "f"))
	c := recs[len(recs)-2]
	if c.msg() != "process_completed" {
		t.Fatalf("got %v", msgs(recs))
	}
	if got := string(field(t, c.data, "output")); got != `{"error":"deliberate failure for input 'boom'","duration":10,"visible":true,"title":"Error"}` {
		t.Errorf("output %s", got)
	}
	if c.m["success"] != false || c.m["title"] != "Error" {
		t.Errorf("completion %s", c.data)
	}
}

func TestMessagesSurviveGapAndMultiplex(t *testing.T) {
	s := newServer(t, nil)
	a := join(t, s, "m", 0, "one")
	b := join(t, s, "m", 1, 2)
	waitFor(t, "both handlers", func() bool { return s.Executions("upper") == 1 && s.Executions("count") == 1 })
	time.Sleep(20 * time.Millisecond)
	recs := stream(t, data(s, "m"))
	per := map[string][]string{}
	for _, r := range recs {
		id, _ := r.m["event_id"].(string)
		per[id] = append(per[id], r.msg())
	}
	if !slices.Equal(per[a], []string{"estimation", "process_starts", "process_completed"}) {
		t.Errorf("event a: %v", per[a])
	}
	if !slices.Equal(per[b], []string{"estimation", "process_starts", "process_generating", "process_generating", "process_completed"}) {
		t.Errorf("event b: %v", per[b])
	}
	if last := recs[len(recs)-1]; last.msg() != "close_stream" {
		t.Errorf("last message %s", last.data)
	}
	n := 0
	for _, r := range recs {
		if r.msg() == "close_stream" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d close_stream", n)
	}
}

func TestUnknownSession(t *testing.T) {
	s := newServer(t, nil)
	recs := stream(t, data(s, "never-joined"))
	if len(recs) != 1 || string(recs[0].data) != `{"msg":"unexpected_error","event_id":null,"message":"404: Not Found","session_not_found":true,"success":false}` {
		t.Errorf("records: %v", recs)
	}
}

// blocking returns an app whose "block" endpoint waits until its context
// ends, reporting starts and cancellations.
func blocking(started, cancelled *atomic.Int32) *gradiotest.App {
	app := gradiotest.NewApp()
	app.Handle("block", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		started.Add(1)
		<-ctx.Done()
		cancelled.Add(1)
		return nil, ctx.Err()
	}, nil, nil)
	app.Handle("echo", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		s, err := c.String(0)
		return []any{s}, err
	}, nil, nil)
	return app
}

func TestCancel(t *testing.T) {
	var started, cancelled atomic.Int32
	s := newServer(t, blocking(&started, &cancelled))
	id := join(t, s, "c", 0, "x")
	waitFor(t, "handler start", func() bool { return started.Load() == 1 })
	var r map[string]any
	if st := postJSON(t, api(s)+"/cancel", map[string]any{"session_hash": "c", "fn_index": 0, "event_id": id}, &r); st != 200 || r["success"] != true {
		t.Fatalf("cancel: %d %v", st, r)
	}
	waitFor(t, "handler cancelled", func() bool { return cancelled.Load() == 1 })
	recs := stream(t, data(s, "c"))
	if got := msgs(recs); !slices.Equal(got, []string{"estimation", "process_starts", "process_completed", "close_stream"}) {
		t.Fatalf("messages %v", got)
	}
	if got := string(recs[2].data); got != `{"msg":"process_completed","event_id":"`+id+`","output":{},"success":true,"title":null}` {
		t.Errorf("synthetic completion %s", got)
	}
	if st := postJSON(t, api(s)+"/reset", map[string]any{"event_id": id}, &r); st != 200 || r["success"] != true {
		t.Errorf("reset: %d %v", st, r)
	}
}

func TestCancelQueued(t *testing.T) {
	var started, cancelled atomic.Int32
	s := newServer(t, blocking(&started, &cancelled))
	first := join(t, s, "q1", 0, "x")
	waitFor(t, "first start", func() bool { return started.Load() == 1 })
	second := join(t, s, "q2", 0, "y") // waits behind the first (limit 1)
	postJSON(t, api(s)+"/cancel", map[string]any{"session_hash": "q2", "fn_index": 0, "event_id": second}, nil)
	recs := stream(t, data(s, "q2"))
	if got := msgs(recs); !slices.Equal(got, []string{"estimation", "process_completed", "close_stream"}) {
		t.Errorf("queued cancel messages %v", got)
	}
	if started.Load() != 1 {
		t.Errorf("the queued event started while the first runs")
	}
	// Real Gradio (4.x-6.x; measured on 5.49.1) does not take a cancelled
	// event out of its queue: it runs once the slot frees, for nobody.
	postJSON(t, api(s)+"/cancel", map[string]any{"session_hash": "q1", "fn_index": 0, "event_id": first}, nil)
	waitFor(t, "first cancelled", func() bool { return cancelled.Load() == 1 })
	waitFor(t, "the cancelled queued event starts", func() bool { return started.Load() == 2 })
}

func TestStreamDropCancelsEvents(t *testing.T) {
	var started, cancelled atomic.Int32
	s := newServer(t, blocking(&started, &cancelled))
	join(t, s, "d", 0, "x")
	join(t, s, "d", 0, "y") // queued behind the first
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", data(s, "d"), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "handler start", func() bool { return started.Load() == 1 })
	cancel()
	resp.Body.Close()
	waitFor(t, "handler cancelled", func() bool { return cancelled.Load() == 1 })
	time.Sleep(20 * time.Millisecond)
	if started.Load() != 1 {
		t.Errorf("queued event of the dropped session ran")
	}
	recs := stream(t, data(s, "d"))
	if len(recs) != 1 || recs[0].m["session_not_found"] != true {
		t.Errorf("after drop: %v", msgs(recs))
	}
}

func TestCutStream(t *testing.T) {
	var started, cancelled atomic.Int32
	s := newServer(t, blocking(&started, &cancelled), func(s *gradiotest.Server) { s.CutStream = 1 })
	join(t, s, "cut", 0, "x")
	resp, err := http.Get(data(s, "cut"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := readSSE(t, resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Errorf("stream ended cleanly; want a broken body")
	}
	if got := msgs(recs); !slices.Equal(got, []string{"estimation", "process_starts"}) {
		t.Errorf("before the cut: %v", got)
	}
	waitFor(t, "handler cancelled", func() bool { return cancelled.Load() == 1 })
	// the fault fired once: the next stream is normal
	join(t, s, "cut2", 1, "hi")
	if got := msgs(stream(t, data(s, "cut2"))); !slices.Equal(got, []string{"estimation", "process_starts", "process_completed", "close_stream"}) {
		t.Errorf("after the cut: %v", got)
	}
}

func TestBadInput(t *testing.T) {
	s := newServer(t, nil)
	cases := []struct {
		name   string
		body   string
		status int
		want   string
	}{
		{"malformed", `{bad`, 422, `"type":"json_invalid"`},
		{"not an object", `[1]`, 422, `"json_invalid"`},
		{"missing data", `{"fn_index":0,"session_hash":"x"}`, 422, `"loc":["body","data"]`},
		{"data not a list", `{"data":"x","fn_index":0,"session_hash":"x"}`, 422, `"list_type"`},
		{"missing session", `{"data":["a"],"fn_index":0}`, 400, `{"detail":"Session hash not found."}`},
		{"missing fn_index", `{"data":["a"],"session_hash":"x"}`, 400, `{"detail":"No function index provided."}`},
		// Gradio 5.49.1 (the default mode) sends the traceback; the other
		// modes' answers: TestBadJoinsAsRecorded.
		{"unknown fn_index", `{"data":["a"],"fn_index":42,"session_hash":"x"}`, 500, "\nKeyError: 42\n"},
		{"fn_index not int", `{"data":["a"],"fn_index":"zero","session_hash":"x"}`, 422, `int_parsing`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, _, b := do(t, "POST", api(s)+"/queue/join", "application/json", []byte(c.body))
			if st != c.status || !strings.Contains(string(b), c.want) {
				t.Errorf("got %d %s, want %d containing %s", st, b, c.status, c.want)
			}
		})
	}
	t.Run("too few inputs", func(t *testing.T) {
		join(t, s, "few", 3, "only one") // counter needs 2
		recs := stream(t, data(s, "few"))
		c := recs[len(recs)-2]
		if c.msg() != "process_completed" || c.m["success"] != false ||
			!strings.Contains(string(field(t, c.data, "output")), "didn't receive enough input values (needed: 2, got: 1)") {
			t.Errorf("completion %s", c.data)
		}
		if s.Executions("counter") != 0 {
			t.Errorf("handler ran")
		}
	})
	t.Run("extra inputs ignored", func(t *testing.T) {
		join(t, s, "extra", 0, "a", "b", "c")
		recs := stream(t, data(s, "extra"))
		if got := string(field(t, field(t, recs[2].data, "output"), "data")); got != `["A"]` {
			t.Errorf("data %s", got)
		}
	})
	t.Run("wrong type", func(t *testing.T) {
		join(t, s, "type", 0, 12)
		recs := stream(t, data(s, "type"))
		if recs[2].m["success"] != false {
			t.Errorf("completion %s", recs[2].data)
		}
	})
	t.Run("unknown route", func(t *testing.T) {
		st, _, b := do(t, "GET", api(s)+"/nope", "", nil)
		if st != 404 || string(b) != `{"detail":"Not Found"}` {
			t.Errorf("%d %s", st, b)
		}
	})
}

func TestQueueFullAndRanks(t *testing.T) {
	var started, cancelled atomic.Int32
	s := newServer(t, blocking(&started, &cancelled), func(s *gradiotest.Server) { s.MaxQueueSize = 2 })
	join(t, s, "r1", 0, "a")
	waitFor(t, "start", func() bool { return started.Load() == 1 })
	join(t, s, "r2", 0, "b")
	join(t, s, "r3", 0, "c")
	st, _, b := do(t, "POST", api(s)+"/queue/join", "application/json", []byte(`{"data":["d"],"fn_index":0,"session_hash":"r4"}`))
	if st != 503 || string(b) != `{"detail":"Queue is full. Max size is 2 and size is 2."}` {
		t.Errorf("queue full: %d %s", st, b)
	}
	// ranks: r2 waits at 0, r3 at 1, both in a queue of 2
	snap := s.Snapshot()
	if snap.Queued != 2 || snap.Running != 1 {
		t.Errorf("snapshot %+v", snap)
	}
	s.UpdateKnobs(func(k *gradiotest.Knobs) { k.DefaultConcurrencyLimit = -1 }) // unlimited: the waiting ones start
	waitFor(t, "all started", func() bool { return started.Load() == 3 })
	for _, sess := range []string{"r1", "r2", "r3"} {
		postJSON(t, api(s)+"/cancel", map[string]any{"session_hash": sess, "fn_index": 0, "event_id": "x"}, nil)
	}
	waitFor(t, "all cancelled", func() bool { return cancelled.Load() == 3 })
}

func TestEstimationRanks(t *testing.T) {
	var started, cancelled atomic.Int32
	s := newServer(t, blocking(&started, &cancelled))
	join(t, s, "e1", 0, "a")
	waitFor(t, "start", func() bool { return started.Load() == 1 })
	join(t, s, "e2", 0, "b")
	join(t, s, "e3", 0, "c")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", data(s, "e3"), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	got := string(buf[:n])
	if !strings.Contains(got, `"rank":1,"queue_size":2`) {
		t.Errorf("third event estimation: %s", got)
	}
	cancel()
	for _, sess := range []string{"e1", "e2"} {
		postJSON(t, api(s)+"/cancel", map[string]any{"session_hash": sess, "fn_index": 0, "event_id": "x"}, nil)
	}
}

func TestHeartbeats(t *testing.T) {
	s := newServer(t, nil, func(s *gradiotest.Server) {
		s.HeartbeatInterval = 10 * time.Millisecond
		s.TimeScale = 0.3 // slow runs 300 ms: many heartbeat periods
	})
	join(t, s, "hb", 2, 1)
	recs := stream(t, data(s, "hb"))
	n := 0
	for _, r := range recs {
		if r.msg() == "heartbeat" {
			n++
			if string(r.data) != `{"msg":"heartbeat","event_id":null}` {
				t.Errorf("heartbeat %s", r.data)
			}
		}
	}
	if n == 0 {
		t.Errorf("no heartbeat in %v", msgs(recs))
	}
	if got := string(field(t, field(t, recs[len(recs)-2].data, "output"), "data")); got != `["slept 1.00s"]` {
		t.Errorf("slow result %s", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", api(s)+"/heartbeat/hb", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	k, _ := resp.Body.Read(buf)
	if string(buf[:k]) != "data: ALIVE\n\n" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Errorf("heartbeat route: %q", buf[:k])
	}
	cancel()
	resp.Body.Close()
}

func TestProgressAndLog(t *testing.T) {
	app := gradiotest.NewApp()
	app.HandleGenerator("chat", func(ctx context.Context, c *gradiotest.Call, yield func(...any) error) error {
		c.Log("info", "thinking")
		c.Progress(1, 2, "steps", "half")
		for _, s := range []string{"Hel", "Hello"} {
			if err := yield(s); err != nil {
				return err
			}
		}
		return nil
	}, nil, nil)
	s := newServer(t, app)
	join(t, s, "p", 0, "hi")
	recs := stream(t, data(s, "p"))
	if got := msgs(recs); !slices.Equal(got, []string{"estimation", "process_starts", "log", "progress", "process_generating", "process_generating", "process_completed", "close_stream"}) {
		t.Fatalf("messages %v", got)
	}
	if got := keys(t, recs[2].data); !slices.Equal(got, []string{"msg", "event_id", "log", "level", "duration", "visible", "title"}) {
		t.Errorf("log keys %v", got)
	}
	if got := string(field(t, recs[3].data, "progress_data")); got != `[{"index":1,"length":2,"unit":"steps","progress":null,"desc":"half"}]` {
		t.Errorf("progress %s", got)
	}
	if got := string(field(t, field(t, recs[5].data, "output"), "data")); got != `[[["append",[],"lo"]]]` {
		t.Errorf("diff %s", got)
	}
}

func TestHandlerPanicAndBadOutputs(t *testing.T) {
	app := gradiotest.NewApp()
	app.Handle("panic", func(ctx context.Context, c *gradiotest.Call) ([]any, error) { panic("boom") }, nil, nil)
	app.Handle("two", func(ctx context.Context, c *gradiotest.Call) ([]any, error) { return []any{1, 2}, nil }, nil, nil)
	s := newServer(t, app)
	for fn, want := range []string{"handler panicked: boom", "didn't return the right number of output values"} {
		sess := fmt.Sprint("s", fn)
		join(t, s, sess, fn, "x")
		recs := stream(t, data(s, sess))
		if c := recs[len(recs)-2]; c.m["success"] != false || !strings.Contains(string(c.data), want) {
			t.Errorf("fn %d: %s", fn, c.data)
		}
	}
}

func TestCloseWaitsForJobs(t *testing.T) {
	var started, cancelled atomic.Int32
	s := gradiotest.NewServer(blocking(&started, &cancelled))
	join(t, s, "w", 0, "x")
	waitFor(t, "start", func() bool { return started.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", data(s, "w"), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []record)
	go func() {
		recs, _ := readSSE(t, resp.Body)
		done <- recs
	}()
	s.Close()
	if cancelled.Load() != 1 {
		t.Errorf("Close returned before the handler ended")
	}
	recs := <-done
	resp.Body.Close()
	if len(recs) == 0 || !strings.Contains(string(recs[len(recs)-1].data), "Server stopped unexpectedly.") {
		t.Errorf("stream end: %v", msgs(recs))
	}
	s.Close() // twice is fine
}

func TestNewServerNil(t *testing.T) {
	s := gradiotest.NewServer(nil)
	defer s.Close()
	var c map[string]any
	if getJSON(t, s.URL+"/config", &c) != 200 || c["protocol"] != "sse_v3" {
		t.Errorf("config %v", c["protocol"])
	}
	if !reflect.DeepEqual(s.Mode, gradiotest.Gradio5) {
		t.Errorf("mode %q", s.Mode)
	}
}

func TestCloseClientConnections(t *testing.T) {
	var started, cancelled atomic.Int32
	s := newServer(t, blocking(&started, &cancelled))
	join(t, s, "cc", 0, "x")
	resp, err := http.Get(data(s, "cc"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "start", func() bool { return started.Load() == 1 })
	s.CloseClientConnections()
	if _, err := readSSE(t, resp.Body); err == nil {
		t.Errorf("stream survived CloseClientConnections")
	}
	resp.Body.Close()
	waitFor(t, "events dropped", func() bool { return cancelled.Load() == 1 })
	if st, _, _ := do(t, "GET", s.URL+"/config", "", nil); st != 200 {
		t.Errorf("server stopped serving: %d", st)
	}
}

// TestCloseUnstarted: closing a server that never started frees its port
// and may be repeated.
func TestCloseUnstarted(t *testing.T) {
	s := gradiotest.NewUnstartedServer(nil)
	addr := s.Listener.Addr().String()
	s.Close()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the port of a closed unstarted server is still held: %v", err)
	}
	l.Close()
	s.Close() // again: no panic, nothing to do
	if s.URL != "" {
		t.Errorf("URL = %q for a server that never started", s.URL)
	}
}

func TestDefaultStepDelay(t *testing.T) {
	s := gradiotest.NewServer(nil) // StepDelay zero: 300 ms, compressed by TimeScale
	defer s.Close()
	s.UpdateKnobs(func(k *gradiotest.Knobs) { k.TimeScale = 0.01 })
	join(t, s, "d", 1, 2)
	if got := msgs(stream(t, data(s, "d"))); len(got) != 6 {
		t.Errorf("messages %v", got)
	}
}
