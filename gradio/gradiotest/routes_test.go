package gradiotest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

func upload(t *testing.T, s *gradiotest.Server, name string, content []byte) (int, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("files", name)
	_, _ = fw.Write(content)
	_ = mw.Close()
	st, _, b := do(t, "POST", api(s)+"/upload", mw.FormDataContentType(), buf.Bytes())
	return st, b
}

func TestUploadReverseDownload(t *testing.T) {
	s := newServer(t, nil, func(s *gradiotest.Server) { s.MaxFileSize = 100 })
	st, b := upload(t, s, "blob", []byte("hello file payload 123\n"))
	var paths []string
	if st != 200 || json.Unmarshal(b, &paths) != nil || len(paths) != 1 || !strings.HasSuffix(paths[0], "/blob") {
		t.Fatalf("upload: %d %s", st, b)
	}
	join(t, s, "file", 5, map[string]any{"path": paths[0], "meta": map[string]any{"_type": "gradio.FileData"}})
	recs := stream(t, data(s, "file"))
	var out []map[string]any
	if err := json.Unmarshal(field(t, field(t, recs[2].data, "output"), "data"), &out); err != nil {
		t.Fatalf("%s: %v", recs[2].data, err)
	}
	fd := out[0]
	if got := keys(t, mustJSON(t, out[0])); len(got) != 7 {
		t.Errorf("FileData keys %v", got)
	}
	p := fd["path"].(string)
	if !strings.HasSuffix(p, "/reversed_blob") || fd["url"] != api(s)+"/file="+p || fd["size"] != 23.0 ||
		fd["orig_name"] != "reversed_blob" || fd["is_stream"] != false || fd["meta"].(map[string]any)["_type"] != "gradio.FileData" {
		t.Errorf("FileData %v", fd)
	}
	st, hdr, body := do(t, "GET", fd["url"].(string), "", nil)
	if st != 200 || string(body) != "\n321 daolyap elif olleh" || hdr.Get("Accept-Ranges") != "bytes" ||
		hdr.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(hdr.Get("Content-Disposition"), "attachment") {
		t.Errorf("download: %d %q %v", st, body, hdr)
	}
	req, _ := http.NewRequest("GET", fd["url"].(string), nil)
	req.Header.Set("Range", "bytes=1-3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var part bytes.Buffer
	_, _ = part.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 206 || part.String() != "321" {
		t.Errorf("range: %d %q", resp.StatusCode, part.String())
	}
	if st, _, body := do(t, "GET", api(s)+"/file=/etc/passwd", "", nil); st != 403 || !strings.Contains(string(body), "File not allowed: /etc/passwd") {
		t.Errorf("outside: %d %s", st, body)
	}
	if st, _, body := do(t, "GET", api(s)+"/file="+url.PathEscape(p+"/../../../../etc/passwd"), "", nil); st != 403 {
		t.Errorf("traversal: %d %s", st, body)
	}
	if st, b := upload(t, s, "big", bytes.Repeat([]byte("x"), 101)); st != 413 || string(b) != "File size exceeded maximum allowed size of 100 bytes." {
		t.Errorf("too large: %d %s", st, b)
	}
	if st, _, b := do(t, "POST", api(s)+"/upload", "multipart/form-data; boundary=zzz", []byte("garbage")); st != 400 {
		t.Errorf("bad multipart: %d %s", st, b)
	}
	if st, _, b := do(t, "POST", api(s)+"/upload", "application/json", []byte("{}")); st != 400 {
		t.Errorf("not multipart: %d %s", st, b)
	}
	// a file input without meta fails like Gradio 5; a path outside the upload dir too
	for i, in := range []any{map[string]any{"path": paths[0]}, map[string]any{"path": "/etc/passwd", "meta": map[string]any{"_type": "gradio.FileData"}}} {
		sess := []string{"nometa", "outside"}[i]
		join(t, s, sess, 5, in)
		recs := stream(t, data(s, sess))
		if recs[2].m["success"] != false {
			t.Errorf("%s: %s", sess, recs[2].data)
		}
	}
	var c map[string]any
	getJSON(t, s.URL+"/config", &c)
	if c["max_file_size"] != 100.0 {
		t.Errorf("config max_file_size %v", c["max_file_size"])
	}
}

func callPost(t *testing.T, s *gradiotest.Server, name string, body any) string {
	t.Helper()
	var r struct {
		EventID string `json:"event_id"`
	}
	if st := postJSON(t, api(s)+"/call/"+name, body, &r); st != 200 {
		t.Fatalf("call %s: %d", name, st)
	}
	return r.EventID
}

func TestCallAPI(t *testing.T) {
	s := newServer(t, nil)
	type ev struct{ event, data string }
	get := func(name, id string) []ev {
		var out []ev
		for _, r := range stream(t, api(s)+"/call/"+name+"/"+id) {
			out = append(out, ev{r.event, string(r.data)})
		}
		return out
	}
	id := callPost(t, s, "upper", map[string]any{"data": []any{"world"}})
	if got := get("upper", id); !slices.Equal(got, []ev{{"complete", `["WORLD"]`}}) {
		t.Errorf("upper: %v", got)
	}
	id = callPost(t, s, "count", map[string]any{"data": []any{3}})
	want := []ev{{"generating", `["0"]`}, {"generating", `["0 1"]`}, {"generating", `["0 1 2"]`}, {"complete", `["0 1 2"]`}}
	if got := get("count", id); !slices.Equal(got, want) {
		t.Errorf("count: %v", got)
	}
	id = callPost(t, s, "fail", map[string]any{"data": []any{"boom"}})
	if got := get("fail", id); len(got) != 1 || got[0].event != "error" || !strings.Contains(got[0].data, `"error":"deliberate failure for input 'boom'"`) {
		t.Errorf("fail: %v", got)
	}
	// State inputs may be left out; the same session_hash keeps the state
	for i, want := range []string{`["1 items: a",null]`, `["2 items: a, b",null]`} {
		id = callPost(t, s, "counter", map[string]any{"data": []any{[]string{"a", "b"}[i]}, "session_hash": "call-sess"})
		if got := get("counter", id); len(got) != 1 || got[0].data != want {
			t.Errorf("counter %d: %v", i, got)
		}
	}
	if got := get("upper", "0123456789abcdef0123456789abcdef"); len(got) != 1 || got[0].event != "error" || got[0].data != `"404: Not Found"` {
		t.Errorf("unknown event: %v", got)
	}
	// Real Gradio: FnIndexInferError, uncaught (testdata/joins).
	if st := postJSON(t, api(s)+"/call/nope", map[string]any{"data": []any{}}, nil); st != 500 {
		t.Errorf("unknown api_name: %d", st)
	}
	if st, _, _ := do(t, "POST", api(s)+"/call/upper", "application/json", []byte("{")); st != 422 {
		t.Errorf("bad body: %d", st)
	}
}

func TestCallV2Gradio6(t *testing.T) {
	s := newServer(t, nil, func(s *gradiotest.Server) { s.Mode = gradiotest.Gradio6 })
	id := callPost(t, s, "v2/count", map[string]any{}) // n defaults to 5
	recs := stream(t, api(s)+"/call/count/"+id)
	if last := recs[len(recs)-1]; last.event != "complete" || string(last.data) != `["0 1 2 3 4"]` {
		t.Errorf("v2 count: %s %s", last.event, last.data)
	}
	join(t, s, "g6", 0, "x")
	recs = stream(t, data(s, "g6"))
	if got := keys(t, recs[2].data); !slices.Equal(got, []string{"msg", "event_id", "output", "success", "title", "used_cache", "cache_duration", "avg_time"}) {
		t.Errorf("6.x completion keys %v", got)
	}
	var c struct {
		Version string           `json:"version"`
		Deps    []map[string]any `json:"dependencies"`
	}
	getJSON(t, s.URL+"/config", &c)
	if c.Version != "6.25.0" || c.Deps[0]["api_visibility"] != "public" || c.Deps[0]["show_api"] != nil {
		t.Errorf("6.x config %s %v", c.Version, c.Deps[0])
	}
}

func TestRun(t *testing.T) {
	s := newServer(t, nil)
	var out map[string]any
	if st := postJSON(t, api(s)+"/run/upper", map[string]any{"data": []any{"x"}, "session_hash": "r"}, &out); st != 200 ||
		out["data"].([]any)[0] != "X" || out["is_generating"] != false {
		t.Errorf("run upper: %d %v", st, out)
	}
	if st := postJSON(t, api(s)+"/run/fail", map[string]any{"data": []any{"x"}}, &out); st != 500 || out["error"] != "deliberate failure for input 'x'" {
		t.Errorf("run fail: %d %v", st, out)
	}
	if st := postJSON(t, api(s)+"/run/predict", map[string]any{"data": []any{"y"}, "fn_index": 0}, &out); st != 200 || out["data"].([]any)[0] != "Y" {
		t.Errorf("run by fn_index: %d %v", st, out)
	}
	if st := postJSON(t, api(s)+"/run/nope", map[string]any{"data": []any{}}, nil); st != 404 {
		t.Errorf("run unknown: %d", st)
	}
}

func TestLogin(t *testing.T) {
	s := newServer(t, nil, func(s *gradiotest.Server) { s.Username, s.Password = "admin", "pass1234" })
	st, _, b := do(t, "GET", s.URL+"/config", "", nil)
	if st != 401 || string(b) != `{"detail":{"error":"Not authenticated","auth_message":null}}` {
		t.Errorf("config without login: %d %s", st, b)
	}
	if st, _, _ := do(t, "POST", api(s)+"/queue/join", "application/json", []byte(`{"data":[],"fn_index":0,"session_hash":"x"}`)); st != 401 {
		t.Errorf("join without login: %d", st)
	}
	var app map[string]any
	if getJSON(t, api(s)+"/app_id", &app) != 200 {
		t.Errorf("app_id must not be protected")
	}
	form := func(u, p string) (int, []*http.Cookie, []byte) {
		resp, err := http.PostForm(s.URL+"/login", url.Values{"username": {u}, "password": {p}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return resp.StatusCode, resp.Cookies(), buf.Bytes()
	}
	if st, _, b := form("admin", "wrong"); st != 400 || string(b) != `{"detail":"Incorrect credentials."}` {
		t.Errorf("bad login: %d %s", st, b)
	}
	st, cookies, b := form("admin", "pass1234")
	if st != 200 || string(b) != `{"success":true}` || len(cookies) != 2 ||
		!strings.HasPrefix(cookies[0].Name, "access-token-") || !strings.HasPrefix(cookies[1].Name, "access-token-unsecure-") {
		t.Fatalf("login: %d %s %v", st, b, cookies)
	}
	req, _ := http.NewRequest("GET", s.URL+"/config", nil)
	req.AddCookie(cookies[1])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if resp.StatusCode != 200 || c["username"] != "admin" {
		t.Errorf("config with cookie: %d %v", resp.StatusCode, c["username"])
	}
}

func TestFaultKnobs(t *testing.T) {
	s := newServer(t, nil)
	s.FailNextConfigs(2)
	for i, want := range []int{500, 500, 200} {
		if st, _, _ := do(t, "GET", s.URL+"/config", "", nil); st != want {
			t.Errorf("config %d: %d, want %d", i, st, want)
		}
	}
	s.UpdateKnobs(func(k *gradiotest.Knobs) { k.FailJoin, k.FaultStatus = 1, 502 })
	if st, _, _ := do(t, "POST", api(s)+"/queue/join", "application/json", []byte(`{"data":["a"],"fn_index":0,"session_hash":"x"}`)); st != 502 {
		t.Errorf("failed join: %d", st)
	}
	join(t, s, "x", 0, "a")
	stream(t, data(s, "x"))
	if s.Executions("upper") != 1 {
		t.Errorf("executions %d, want 1 (the failed join must not run)", s.Executions("upper"))
	}

	s.SetQueueFull(true)
	if st, _, b := do(t, "POST", api(s)+"/queue/join", "application/json", []byte(`{"data":["a"],"fn_index":0,"session_hash":"x"}`)); st != 503 || !strings.Contains(string(b), "Queue is full.") {
		t.Errorf("queue full: %d %s", st, b)
	}
	s.SetQueueFull(false)

	s.SetStall(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/config", nil)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Errorf("stalled request answered")
	}
	cancel()
	done := make(chan int)
	go func() {
		resp, err := http.Get(s.URL + "/config")
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	time.Sleep(20 * time.Millisecond)
	s.SetStall(false)
	if st := <-done; st != 200 {
		t.Errorf("after un-stall: %d", st)
	}

	s.UpdateKnobs(func(k *gradiotest.Knobs) { k.SlowBody = time.Millisecond })
	if st, _, b := do(t, "GET", api(s)+"/info", "", nil); st != 200 || !json.Valid(b) {
		t.Errorf("slow body: %d", st)
	}
	s.UpdateKnobs(func(k *gradiotest.Knobs) { k.SlowBody = 0 })

	s.Sleep(0)
	if st, _, _ := do(t, "GET", s.URL+"/config", "", nil); st != 503 {
		t.Errorf("asleep: %d", st)
	}
	s.Wake()
	s.Sleep(5 * time.Millisecond) // wakes after the first visit
	do(t, "GET", s.URL+"/config", "", nil)
	waitFor(t, "wake-up", func() bool { return !s.Asleep() })

	before := s.AppIDValue()
	s.Restart()
	var c struct {
		AppID uint64 `json:"app_id"`
	}
	getJSON(t, s.URL+"/config", &c)
	if c.AppID == before || c.AppID < 1<<63 {
		t.Errorf("app_id after restart %d (before %d)", c.AppID, before)
	}
	s.UpdateKnobs(func(k *gradiotest.Knobs) { k.ConnectCost = 5 * time.Millisecond })
	if st, _, _ := do(t, "GET", api(s)+"/info", "", nil); st != 200 {
		t.Errorf("connect cost: %d", st)
	}
	s.ResetFaults()
	if k := s.CurrentKnobs(); k.ConnectCost != 0 || s.Executions("upper") != 0 {
		t.Errorf("after reset: %+v %d", k, s.Executions("upper"))
	}
}

func TestConcurrencyLimitAndStall(t *testing.T) {
	var started, cancelled atomic.Int32
	s := newServer(t, blocking(&started, &cancelled), func(s *gradiotest.Server) { s.DefaultConcurrencyLimit = 2 })
	for _, sess := range []string{"a", "b", "c"} {
		join(t, s, sess, 0, "x")
	}
	waitFor(t, "two running", func() bool { return started.Load() == 2 })
	time.Sleep(20 * time.Millisecond)
	if n := started.Load(); n != 2 {
		t.Errorf("%d running, want 2", n)
	}
	if snap := s.Snapshot(); snap.Running != 2 || snap.Queued != 1 {
		t.Errorf("snapshot %+v", snap)
	}
}

func TestControlHTTP(t *testing.T) {
	s := newServer(t, nil)
	var snap gradiotest.Snapshot
	if st := postJSON(t, s.URL+"/_sim/faults", `{"fail_join":1,"latency":"2ms","time_scale":0.5,"connect_cost":0.001}`, &snap); st != 200 {
		t.Fatalf("faults: %d", st)
	}
	k := s.CurrentKnobs()
	if k.FailJoin != 1 || k.Latency != 2*time.Millisecond || k.TimeScale != 0.5 || k.ConnectCost != time.Millisecond {
		t.Errorf("knobs %+v", k)
	}
	if st := postJSON(t, s.URL+"/_sim/faults", `{"nope":1}`, nil); st != 400 {
		t.Errorf("unknown knob: %d", st)
	}
	if st, _, _ := do(t, "POST", api(s)+"/queue/join", "application/json", []byte(`{"data":["a"],"fn_index":0,"session_hash":"x"}`)); st != 500 {
		t.Errorf("join after fail_join: %d", st)
	}
	join(t, s, "x", 0, "a")
	stream(t, data(s, "x"))
	var ex map[string]int
	getJSON(t, s.URL+"/_sim/executions", &ex)
	if ex["upper"] != 1 {
		t.Errorf("executions %v", ex)
	}
	getJSON(t, s.URL+"/_sim/state", &snap)
	if snap.Mode != gradiotest.Gradio5 || snap.Protocol != "sse_v3" || snap.AppID != s.AppIDValue() || snap.Executions["upper"] != 1 {
		t.Errorf("state %+v", snap)
	}
	postJSON(t, s.URL+"/_sim/sleep", `{"wake_after":"1h"}`, nil)
	if st, _, _ := do(t, "GET", s.URL+"/config", "", nil); st != 503 {
		t.Errorf("asleep: %d", st)
	}
	if st, _, _ := do(t, "GET", s.URL+"/_sim/state", "", nil); st != 200 {
		t.Errorf("/_sim/ while asleep: %d", st)
	}
	postJSON(t, s.URL+"/_sim/wake", "", nil)
	postJSON(t, s.URL+"/_sim/faults", `{"stall":true}`, nil)
	if st, _, _ := do(t, "GET", s.URL+"/_sim/state", "", nil); st != 200 {
		t.Errorf("/_sim/ while stalled: %d", st)
	}
	old := s.AppIDValue()
	postJSON(t, s.URL+"/_sim/restart", "", nil)
	var after gradiotest.Snapshot
	postJSON(t, s.URL+"/_sim/reset", "", &after)
	if s.CurrentKnobs().Stall || s.AppIDValue() == old || len(after.Executions) != 0 {
		t.Errorf("after reset: %+v", after)
	}
}

func TestHub(t *testing.T) {
	hub := gradiotest.NewHub()
	defer hub.Close()
	s := newServer(t, nil)
	hub.AddSpace("sim/replica-1", s)
	hub.AddSpace("sim/secret", newServer(t, nil))
	hub.SetPrivate("sim/secret", "hf_123")
	hub.SetWakeDelay(5 * time.Millisecond)

	var host struct{ Subdomain, Host string }
	if getJSON(t, hub.URL+"/api/spaces/sim/replica-1/host", &host) != 200 || host.Host != s.URL || host.Subdomain != "sim-replica-1" {
		t.Errorf("host %+v", host)
	}
	var info struct {
		ID, Host, Subdomain string
		Private             bool
		Runtime             struct{ Stage string }
	}
	if getJSON(t, hub.URL+"/api/spaces/sim/replica-1", &info) != 200 || info.ID != "sim/replica-1" || info.Runtime.Stage != "RUNNING" || info.Host != s.URL {
		t.Errorf("info %+v", info)
	}
	var rt struct {
		Stage    string
		Hardware map[string]any
	}
	if getJSON(t, hub.URL+"/api/spaces/sim/replica-1/runtime", &rt) != 200 || rt.Stage != "RUNNING" || rt.Hardware["current"] != "cpu-basic" {
		t.Errorf("runtime %+v", rt)
	}
	if st := getJSON(t, hub.URL+"/api/spaces/sim/missing/host", nil); st != 404 {
		t.Errorf("missing: %d", st)
	}
	if st := getJSON(t, hub.URL+"/api/spaces/sim/secret/host", nil); st != 401 {
		t.Errorf("private without token: %d", st)
	}
	req, _ := http.NewRequest("GET", hub.URL+"/api/spaces/sim/secret/jwt", nil)
	req.Header.Set("Authorization", "Bearer hf_123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var jwt struct{ Token string }
	_ = json.NewDecoder(resp.Body).Decode(&jwt)
	resp.Body.Close()
	if resp.StatusCode != 200 || jwt.Token == "" {
		t.Errorf("jwt: %d %+v", resp.StatusCode, jwt)
	}

	hub.SetStage("sim/replica-1", gradiotest.StageSleeping)
	if st, _, _ := do(t, "GET", s.URL+"/config", "", nil); st != 503 {
		t.Errorf("sleeping replica /config: %d", st)
	}
	getJSON(t, hub.URL+"/api/spaces/sim/replica-1", &info) // the look-up wakes it
	waitFor(t, "wake", func() bool { return hub.Stage("sim/replica-1") == gradiotest.StageRunning })
	if st, _, _ := do(t, "GET", s.URL+"/config", "", nil); st != 200 {
		t.Errorf("woken replica: %d", st)
	}
	for _, stage := range []string{gradiotest.StageBuilding, gradiotest.StagePaused, gradiotest.StageRuntimeError, gradiotest.StageNoAppFile, gradiotest.StageConfigError} {
		hub.SetStage("sim/replica-1", stage)
		getJSON(t, hub.URL+"/api/spaces/sim/replica-1/runtime", &rt)
		if rt.Stage != stage {
			t.Errorf("stage %s reported as %s", stage, rt.Stage)
		}
		if st, _, _ := do(t, "GET", s.URL+"/config", "", nil); st != 503 {
			t.Errorf("%s replica: %d", stage, st)
		}
	}
	hub.SetStageFor("sim/replica-1", gradiotest.StageBuilding, 5*time.Millisecond)
	waitFor(t, "build done", func() bool { return hub.Stage("sim/replica-1") == gradiotest.StageRunning })
	if hub.Lookups("sim/replica-1") == 0 {
		t.Errorf("no look-ups counted")
	}
}

func TestRequestCounters(t *testing.T) {
	s := newServer(t, nil)
	s.FailNextConfigs(1)
	do(t, "GET", s.URL+"/config", "", nil)
	do(t, "GET", s.URL+"/config/", "", nil)
	do(t, "GET", api(s)+"/info", "", nil)
	join(t, s, "rc", 0, "x")
	stream(t, data(s, "rc"))
	for route, want := range map[string]int{"config": 2, "info": 1, "queue/join": 1, "queue/data": 1, "upload": 0} {
		if got := s.Requests(route); got != want {
			t.Errorf("Requests(%q) = %d, want %d", route, got, want)
		}
	}
	var reqs map[string]int
	getJSON(t, s.URL+"/_sim/requests", &reqs)
	if reqs["config"] != 2 {
		t.Errorf("/_sim/requests %v", reqs)
	}
}

func TestPrivateSpaceReplica(t *testing.T) {
	hub := gradiotest.NewHub()
	defer hub.Close()
	s := newServer(t, nil)
	hub.AddSpace("sim/private", s)
	hub.SetPrivate("sim/private", "hf_abc")
	if st, hdr, _ := do(t, "GET", s.URL+"/config", "", nil); st != 401 || strings.Contains(hdr.Get("Content-Type"), "json") {
		t.Errorf("no token: %d %s", st, hdr.Get("Content-Type"))
	}
	for _, h := range []string{"Authorization", "X-HF-Authorization"} {
		req, _ := http.NewRequest("GET", s.URL+"/config", nil)
		req.Header.Set(h, "Bearer hf_abc")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", h, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("GET", hub.URL+"/api/spaces/sim/private/jwt", nil)
	req.Header.Set("Authorization", "Bearer hf_abc")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var jwt struct{ Token string }
	_ = json.NewDecoder(resp.Body).Decode(&jwt)
	resp.Body.Close()
	if st, _, _ := do(t, "GET", s.URL+"/config?__sign="+jwt.Token, "", nil); st != 200 {
		t.Errorf("__sign: %d", st)
	}
	if st, _, _ := do(t, "GET", s.URL+"/_sim/state", "", nil); st != 200 {
		t.Errorf("/_sim/ must stay open: %d", st)
	}
	s.SetHFToken("")
	if st, _, _ := do(t, "GET", s.URL+"/config", "", nil); st != 200 {
		t.Errorf("public again: %d", st)
	}
}

func TestCallHeaderAndJitter(t *testing.T) {
	app := gradiotest.NewApp()
	app.Handle("hdr", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		return []any{c.Header.Get("X-Ip-Token") + "/" + c.Header.Get("X-Gradio-User")}, nil
	}, nil, nil)
	s := newServer(t, app, func(s *gradiotest.Server) { s.ConnectCost, s.ConnectJitter = time.Millisecond, time.Millisecond })
	if st, _, _ := do(t, "GET", s.URL+"/config", "", nil); st != 200 {
		t.Fatal(st)
	}
	req, _ := http.NewRequest("POST", api(s)+"/queue/join", strings.NewReader(`{"data":["x"],"fn_index":0,"session_hash":"h"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Ip-Token", "ip123")
	req.Header.Set("X-Gradio-User", "api")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	recs := stream(t, data(s, "h"))
	if got := string(field(t, field(t, recs[2].data, "output"), "data")); got != `["ip123/api"]` {
		t.Errorf("handler saw %s", got)
	}
}

func TestStateTTLAfterHeartbeatCloses(t *testing.T) {
	s := newServer(t, nil, func(s *gradiotest.Server) { s.StateTTL = 20 * time.Millisecond })
	counter := func(item string) string {
		join(t, s, "ttl", 3, item, nil)
		recs := stream(t, data(s, "ttl"))
		return string(field(t, field(t, recs[2].data, "output"), "data"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", api(s)+"/heartbeat/ttl", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	counter("a")
	time.Sleep(40 * time.Millisecond) // heartbeat open: state kept
	if got := counter("b"); got != `["2 items: a, b",null]` {
		t.Errorf("with heartbeat open: %s", got)
	}
	cancel()
	resp.Body.Close()
	time.Sleep(80 * time.Millisecond) // the server notices the close, then the TTL passes
	if got := counter("c"); got != `["1 items: c",null]` {
		t.Errorf("after the TTL: %s", got)
	}
}

func TestPrivateEndpointAndPerEndpointLimit(t *testing.T) {
	var started, cancelled atomic.Int32
	app := blocking(&started, &cancelled)
	app.Endpoints[0].ConcurrencyLimit = -1 // unlimited, whatever the server default
	app.Endpoints[1].Private = true
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio6} {
		t.Run(string(mode), func(t *testing.T) {
			started.Store(0)
			cancelled.Store(0)
			s := newServer(t, app, func(s *gradiotest.Server) { s.Mode = mode })
			var info struct {
				Named map[string]map[string]any `json:"named_endpoints"`
			}
			getJSON(t, api(s)+"/info", &info)
			if _, ok := info.Named["/echo"]; ok || len(info.Named) != 1 {
				t.Errorf("private endpoint listed: %v", info.Named)
			}
			if mode == gradiotest.Gradio6 && info.Named["/block"]["api_visibility"] != "public" {
				t.Errorf("6.x info %v", info.Named["/block"])
			}
			var cfg struct {
				Deps []map[string]any `json:"dependencies"`
			}
			getJSON(t, s.URL+"/config", &cfg)
			if mode == gradiotest.Gradio5 && cfg.Deps[1]["api_name"] != false {
				t.Errorf("5.x private api_name %v", cfg.Deps[1]["api_name"])
			}
			if mode == gradiotest.Gradio6 && cfg.Deps[1]["api_visibility"] != "private" {
				t.Errorf("6.x private visibility %v", cfg.Deps[1]["api_visibility"])
			}
			join(t, s, "p", 1, "still callable by fn_index")
			if got := string(field(t, field(t, stream(t, data(s, "p"))[2].data, "output"), "data")); got != `["still callable by fn_index"]` {
				t.Errorf("private call %s", got)
			}
			for i := 0; i < 3; i++ {
				join(t, s, fmt.Sprint("u", i), 0, "x")
			}
			waitFor(t, "three at once", func() bool { return started.Load() == 3 })
			for i := 0; i < 3; i++ {
				postJSON(t, api(s)+"/cancel", map[string]any{"session_hash": fmt.Sprint("u", i), "fn_index": 0, "event_id": "x"}, nil)
			}
			waitFor(t, "cancelled", func() bool { return cancelled.Load() == 3 })
		})
	}
}
