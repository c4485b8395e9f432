package gradiotest_test

// The conformance suite (STYLE item 11): a table of protocol cases that runs
// against the simulator by default and against any Gradio app whose URL is in
// GRADIOPOOL_CONFORMANCE_URL, so that the simulator and real Gradio cannot
// drift apart unnoticed.
//
// Two tests make it up:
//
//   - TestJSClientConformance runs the OFFICIAL @gradio/client (pinned in
//     testdata/jsclient/package.json) against the app through
//     testdata/jsclient/conformance.mjs, one subtest per check the script
//     reports. The script also runs the scenario of the real captures through
//     a logging proxy; the recorded wire is then compared with the shapes
//     copied from the real Gradio 5.49.1 captures (subtests wire/...).
//   - TestConformanceRawWire talks raw HTTP to the app and compares /config,
//     /info and the SSE messages of each built-in endpoint with the same
//     recorded shapes. It needs no Node.
//
// Running against a real Gradio app: start a Gradio 5.x or 6.x app that
// serves the six endpoints of the captures (upper, count, slow, counter,
// fail, reverse_file; testdata/realgradio/research_app.py is the captured
// app itself, whose config and /info are then also compared value for
// value) and run
//
//	GRADIOPOOL_CONFORMANCE_URL=http://127.0.0.1:7860 go test -run Conformance ./gradio/gradiotest/
//
// Checks that need the simulator's /_sim/ control endpoints are skipped then.
// The auth/... checks also need a second copy launched with
// auth=("user", "pass"):
//
//	GRADIOPOOL_CONFORMANCE_AUTH_URL=http://127.0.0.1:7861 GRADIOPOOL_CONFORMANCE_AUTH=user:pass
//
// (against the simulator they use a second simulator with Username/Password).
// Against the simulator, the space_id/... checks also resolve Space ids
// through the simulated Hub (conformance.mjs redirects the client's Hub
// look-ups there); against a real app they are skipped.
//
// Node: the JS suite needs node (20+) and `npm ci` in testdata/jsclient
// (`make jsclient`). Without them the test is skipped, unless
// GRADIOPOOL_REQUIRE_NODE=1 (set by `make test` and CI), in which case it
// fails: a skipped conformance suite must never pass CI silently.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

const (
	envConformanceURL     = "GRADIOPOOL_CONFORMANCE_URL"
	envConformanceAuthURL = "GRADIOPOOL_CONFORMANCE_AUTH_URL"
	envConformanceAuth    = "GRADIOPOOL_CONFORMANCE_AUTH"
	envRequireNode        = "GRADIOPOOL_REQUIRE_NODE"

	jsClientDir  = "../../testdata/jsclient"
	expectedFile = "testdata/conformance/gradio-5.49.1_jsclient-2.7.0.json"

	// nodeSuiteTimeout bounds the whole Node run (a hang guard: the suite
	// takes a few seconds against the simulator).
	nodeSuiteTimeout = 4 * time.Minute
	// rawTimeout bounds each raw HTTP exchange of TestConformanceRawWire.
	rawTimeout = time.Minute
)

// waitingOnSim lists JS checks the simulator is known to fail, with the
// reason; such a check is reported as skipped instead of failed so that main
// stays green while the simulator catches up. Keep it empty when possible.
var waitingOnSim = map[string]string{}

// conformanceTarget returns the base URL of the app under test: the real app
// of GRADIOPOOL_CONFORMANCE_URL (srv nil), or a fresh simulator tuned to be
// fast.
func conformanceTarget(t *testing.T) (url string, srv *gradiotest.Server) {
	t.Helper()
	if u := os.Getenv(envConformanceURL); u != "" {
		t.Logf("running against the real app at %s (%s)", u, envConformanceURL)
		return strings.TrimRight(u, "/"), nil
	}
	srv = gradiotest.NewUnstartedServer(nil)
	// Short generator steps keep the suite quick; everything else keeps
	// Gradio's defaults so the wire looks like the real one.
	srv.StepDelay = 5 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, srv
}

// ---------------------------------------------------------------- expectations

// expectations are the shapes copied from the real Gradio 5.49.1 captures
// (see the file's "about").
type expectations struct {
	GradioVersion   string                     `json:"gradio_version"`
	Config          map[string]json.RawMessage `json:"config"`
	ConfigKeys      []string                   `json:"config_keys"`
	DependencyKeys  []string                   `json:"dependency_keys"`
	ComponentKeys   []string                   `json:"component_keys"`
	LayoutCompKeys  []string                   `json:"layout_component_keys"`
	Dependencies    []expDependency            `json:"dependencies"`
	Components      []expComponent             `json:"components"`
	Info            json.RawMessage            `json:"info"`
	FullComponents  []json.RawMessage          `json:"config_components"`
	FullDeps        json.RawMessage            `json:"config_dependencies"`
	FullLayout      json.RawMessage            `json:"config_layout"`
	WireAll         []expExchange              `json:"wire_all_endpoints"`
	CallsAll        []expCall                  `json:"calls_all_endpoints"`
	CallsGenerator  []expCall                  `json:"calls_connect_predict_generator"`
	UploadResponse  json.RawMessage            `json:"upload"`
	DownloadHeaders struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
	} `json:"download"`
}

type expDependency struct {
	ID        int             `json:"id"`
	APIName   string          `json:"api_name"`
	Inputs    []int           `json:"inputs"`
	Outputs   []int           `json:"outputs"`
	BackendFn bool            `json:"backend_fn"`
	Queue     json.RawMessage `json:"queue"`
	Types     struct {
		Generator bool `json:"generator"`
		Cancel    bool `json:"cancel"`
	} `json:"types"`
	Connection string `json:"connection"`
}

type expComponent struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	SkipAPI bool   `json:"skip_api"`
}

type expExchange struct {
	Request    string            `json:"request"`
	ReqHeaders map[string]string `json:"req_headers"`
	Status     int               `json:"status"`
	ResHeaders map[string]string `json:"res_headers"`
}

type expCall struct {
	APIName      string            `json:"api_name"`
	Request      json.RawMessage   `json:"request"`
	JoinResponse json.RawMessage   `json:"join_response"`
	Messages     []json.RawMessage `json:"messages"`
}

func loadExpectations(t *testing.T) *expectations {
	t.Helper()
	b, err := os.ReadFile(expectedFile)
	if err != nil {
		t.Fatalf("expectations: %v", err)
	}
	var e expectations
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("expectations %s: %v", expectedFile, err)
	}
	return &e
}

// ---------------------------------------------------------------- ordered JSON

// object is a JSON object with its keys in wire order: Gradio serializes
// pydantic models with orjson, which keeps field order, and the order is part
// of what a faithful simulator reproduces.
type object struct {
	keys []string
	m    map[string]json.RawMessage
}

func parseObject(raw []byte) (object, error) {
	o := object{m: map[string]json.RawMessage{}}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return o, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return o, fmt.Errorf("not a JSON object: %.80s", raw)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return o, err
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return o, err
		}
		o.keys = append(o.keys, k)
		o.m[k] = v
	}
	return o, nil
}

func mustObject(t *testing.T, raw []byte, what string) object {
	t.Helper()
	o, err := parseObject(raw)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return o
}

func (o object) str(k string) string {
	var s string
	_ = json.Unmarshal(o.m[k], &s)
	return s
}

func (o object) isNull(k string) bool {
	v, ok := o.m[k]
	return ok && string(bytes.TrimSpace(v)) == "null"
}

func (o object) isNumber(k string) bool {
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(o.m[k]))
	d.UseNumber()
	return d.Decode(&n) == nil
}

// jsonEqual compares two JSON texts by value.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

// ---------------------------------------------------------------- message comparison

// callCheck describes how to compare one recorded call with the real one.
type callCheck struct {
	// wantData, when set, replaces the completed data of the real capture
	// (the slow call sleeps for a shorter time than the capture's).
	wantData json.RawMessage
	// fileOutput says output 0 is a FileData whose path differs by run.
	fileOutput bool
	// root is the expected base of FileData URLs (config.root).
	root string
	// gradio6 adds the fields Gradio 6 appends to the 5.49.1 shapes:
	// used_cache, cache_duration and avg_time on process_completed (null
	// for errors, else used_cache null and the two times as numbers), and
	// used_cache (null) at the end of a success output.
	gradio6 bool
}

// gradio6Completed and gradio6Output are the fields Gradio 6 (6.25.0
// measured) appends to 5.49.1's process_completed and to its outputs.
var (
	gradio6Completed = []string{"used_cache", "cache_duration", "avg_time"}
	gradio6Output    = []string{"used_cache"}
)

// compareMessages checks the SSE messages of one call against the real
// capture: the same message types in the same order, the same fields in the
// same order per message, event ids matching the join, the same data (diffs
// included) and success/title values. Durations and ETAs only need the right
// JSON type.
func compareMessages(t *testing.T, got []json.RawMessage, eventID string, want expCall, cc callCheck) {
	t.Helper()
	g := dropHeartbeats(t, got)
	w := dropHeartbeats(t, want.Messages)
	if gs, ws := msgTypes(g), msgTypes(w); !slices.Equal(gs, ws) {
		t.Errorf("message sequence\n got %v\nwant %v", gs, ws)
		return
	}
	for i := range g {
		gm, wm := g[i], w[i]
		msg := wm.str("msg")
		if cc.gradio6 && msg == "process_completed" {
			wm.keys = append(slices.Clone(wm.keys), gradio6Completed...)
			failed := string(gm.m["success"]) == "false"
			for _, k := range gradio6Completed {
				if k == "used_cache" || failed {
					if !gm.isNull(k) {
						t.Errorf("%s %s = %s, want null", msg, k, gm.m[k])
					}
				} else if !gm.isNumber(k) {
					t.Errorf("%s %s = %s, want a number", msg, k, gm.m[k])
				}
			}
		}
		if !slices.Equal(gm.keys, wm.keys) {
			t.Errorf("%s (#%d) fields\n got %v\nwant %v", msg, i, gm.keys, wm.keys)
		}
		if msg == "close_stream" {
			if !gm.isNull("event_id") {
				t.Errorf("close_stream event_id = %s, want null", gm.m["event_id"])
			}
			continue
		}
		if id := gm.str("event_id"); id != eventID {
			t.Errorf("%s event_id = %q, want the join's %q", msg, id, eventID)
		}
		switch msg {
		case "estimation":
			for _, k := range []string{"rank", "queue_size"} {
				if !jsonEqual(gm.m[k], wm.m[k]) {
					t.Errorf("estimation %s = %s, want %s (idle app)", k, gm.m[k], wm.m[k])
				}
			}
			if !gm.isNull("rank_eta") && !gm.isNumber("rank_eta") {
				t.Errorf("estimation rank_eta = %s, want null or a number", gm.m["rank_eta"])
			}
		case "process_starts":
			if !gm.isNull("eta") && !gm.isNumber("eta") {
				t.Errorf("process_starts eta = %s, want null or a number", gm.m["eta"])
			}
		case "process_generating", "process_completed":
			for _, k := range gm.keys {
				if k == "output" || k == "event_id" || k == "msg" {
					continue
				}
				if _, ok := wm.m[k]; ok && !jsonEqual(gm.m[k], wm.m[k]) {
					t.Errorf("%s %s = %s, want %s", msg, k, gm.m[k], wm.m[k])
				}
			}
			compareOutput(t, msg, i, gm.m["output"], wm.m["output"], msg == "process_completed", cc)
		}
	}
}

func compareOutput(t *testing.T, msg string, i int, got, want json.RawMessage, final bool, cc callCheck) {
	t.Helper()
	gotObj, err := parseObject(got)
	if err != nil {
		t.Errorf("%s (#%d) output: %v", msg, i, err)
		return
	}
	wantObj, _ := parseObject(want)
	if _, isErr := wantObj.m["error"]; cc.gradio6 && !isErr {
		wantObj.keys = append(slices.Clone(wantObj.keys), gradio6Output...)
		if !gotObj.isNull("used_cache") {
			t.Errorf("%s (#%d) output.used_cache = %s, want null", msg, i, gotObj.m["used_cache"])
		}
	}
	if !slices.Equal(gotObj.keys, wantObj.keys) {
		t.Errorf("%s (#%d) output fields\n got %v\nwant %v", msg, i, gotObj.keys, wantObj.keys)
	}
	if _, isErr := wantObj.m["error"]; isErr {
		// gr.Error payload: the whole object is deterministic.
		if !jsonEqual(got, want) {
			t.Errorf("%s error output\n got %s\nwant %s", msg, compact(got), compact(want))
		}
		return
	}
	for _, k := range []string{"duration", "average_duration"} {
		if !gotObj.isNumber(k) {
			t.Errorf("%s output.%s = %s, want a number", msg, k, gotObj.m[k])
		}
	}
	for _, k := range []string{"is_generating", "render_config", "changed_state_ids"} {
		if !jsonEqual(gotObj.m[k], wantObj.m[k]) {
			t.Errorf("%s output.%s = %s, want %s", msg, k, gotObj.m[k], wantObj.m[k])
		}
	}
	wantData := wantObj.m["data"]
	if final && cc.wantData != nil {
		wantData = cc.wantData
	}
	if cc.fileOutput {
		compareFileData(t, gotObj.m["data"], wantData, cc.root)
		return
	}
	if !jsonEqual(gotObj.m["data"], wantData) {
		t.Errorf("%s (#%d) output.data = %s, want %s", msg, i, compact(gotObj.m["data"]), compact(wantData))
	}
}

var gradioTmpPath = regexp.MustCompile(`^/.+/[^/]+$`)

func compareFileData(t *testing.T, got, want json.RawMessage, root string) {
	t.Helper()
	var g, w []json.RawMessage
	if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil || len(g) != len(w) || len(g) != 1 {
		t.Errorf("file output data = %s, want one FileData like %s", compact(got), compact(want))
		return
	}
	gf, err := parseObject(g[0])
	if err != nil {
		t.Errorf("file output: %v", err)
		return
	}
	wf, _ := parseObject(w[0])
	if !slices.Equal(gf.keys, wf.keys) {
		t.Errorf("FileData fields\n got %v\nwant %v", gf.keys, wf.keys)
	}
	for _, k := range []string{"size", "orig_name", "mime_type", "is_stream", "meta"} {
		if !jsonEqual(gf.m[k], wf.m[k]) {
			t.Errorf("FileData.%s = %s, want %s", k, gf.m[k], wf.m[k])
		}
	}
	path := gf.str("path")
	if !gradioTmpPath.MatchString(path) {
		t.Errorf("FileData.path = %q, want an absolute server path", path)
	}
	if want := root + "/gradio_api/file=" + path; root != "" && gf.str("url") != want {
		t.Errorf("FileData.url = %q, want %q (root + prefix + /file= + path)", gf.str("url"), want)
	}
}

func dropHeartbeats(t *testing.T, msgs []json.RawMessage) []object {
	t.Helper()
	var out []object
	for _, m := range msgs {
		o := mustObject(t, m, "SSE message")
		if o.str("msg") == "heartbeat" {
			continue
		}
		out = append(out, o)
	}
	return out
}

func msgTypes(msgs []object) []string {
	s := make([]string, len(msgs))
	for i, m := range msgs {
		s[i] = m.str("msg")
	}
	return s
}

// ---------------------------------------------------------------- JS client suite

// jsResult is one line printed by conformance.mjs.
type jsResult struct {
	Name    string          `json:"name"`
	OK      bool            `json:"ok"`
	Skipped bool            `json:"skipped"`
	Detail  json.RawMessage `json:"detail"`
}

// skipOrFatal skips when the JS toolchain is missing, except under
// GRADIOPOOL_REQUIRE_NODE=1 where that is a failure.
func skipOrFatal(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(envRequireNode) == "1" {
		t.Fatalf("%s (%s=1 requires the JS conformance suite to run)", msg, envRequireNode)
	}
	t.Skip(msg + " (set " + envRequireNode + "=1 to make this a failure)")
}

// nodeSuite finds node and the installed client, or skips (fails under
// GRADIOPOOL_REQUIRE_NODE=1).
func nodeSuite(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		skipOrFatal(t, "node not found in PATH: the JS client conformance suite needs Node 20+")
	}
	dir, err = filepath.Abs(jsClientDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@gradio", "client", "package.json")); err != nil {
		skipOrFatal(t, "@gradio/client is not installed: run `npm ci` in testdata/jsclient (make jsclient)")
	}
	return node, dir
}

// runJSSuite runs conformance.mjs with args and reports each check it prints
// as a subtest. It returns the names of the checks that ran.
func runJSSuite(t *testing.T, sim bool, args ...string) map[string]bool {
	t.Helper()
	node, dir := nodeSuite(t)
	ctx, cancel := context.WithTimeout(context.Background(), nodeSuiteTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"conformance.mjs"}, args...)...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	runErr := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("node suite did not finish within %v (hang guard)\nstdout:\n%s\nstderr:\n%s", nodeSuiteTimeout, stdout.String(), stderr.String())
	}

	var results []jsResult
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r jsResult
		if err := json.Unmarshal(line, &r); err != nil {
			t.Errorf("unparsable line from conformance.mjs: %s", line)
			continue
		}
		results = append(results, r)
	}
	failed := false
	seen := map[string]bool{}
	for _, r := range results {
		seen[r.Name] = true
		ok := t.Run(r.Name, func(t *testing.T) {
			switch {
			case r.Skipped:
				t.Skip(compact(r.Detail))
			case !r.OK:
				if why, ok := waitingOnSim[r.Name]; ok && sim {
					t.Skipf("waiting on sim: %s (failure: %s)", why, compact(r.Detail))
				}
				t.Error(compact(r.Detail))
			default:
				t.Log(compact(r.Detail))
			}
		})
		failed = failed || !ok
	}
	for _, name := range []string{"client_version", "connect", "view_api", "submit/count_generator", "cancel/running_job"} {
		if !seen[name] {
			t.Errorf("conformance.mjs reported no %q check", name)
		}
	}
	if runErr != nil && !failed {
		var ee *exec.ExitError
		if !errors.As(runErr, &ee) || !hasWaitingSkips(results, sim) {
			t.Errorf("node exited with %v but no check failed\nstderr:\n%s", runErr, stderr.String())
		}
	}
	if t.Failed() {
		t.Logf("node stderr:\n%s", stderr.String())
	}
	return seen
}

func TestJSClientConformance(t *testing.T) {
	nodeSuite(t)
	url, srv := conformanceTarget(t)
	sim := srv != nil
	wireFile := filepath.Join(t.TempDir(), "wire.json")
	args := []string{url, "--wire-out", wireFile}
	if sim {
		args = append(args, "--sim")
		auth := gradiotest.NewUnstartedServer(nil)
		auth.StepDelay = srv.StepDelay
		auth.Username, auth.Password = "conformance", "s3cret:pass"
		auth.Start()
		t.Cleanup(auth.Close)
		args = append(args, "--auth-url", auth.URL, "--auth", auth.Username+":"+auth.Password)
		hub := gradiotest.NewHub()
		t.Cleanup(hub.Close)
		hub.AddSpace("gradiopool/conformance", srv)
		private := gradiotest.NewServer(nil) // a private Space's replica checks the token too
		t.Cleanup(private.Close)
		hub.AddSpace("gradiopool/private", private)
		hub.SetPrivate("gradiopool/private", "hf_conformance")
		args = append(args, "--hub-url", hub.URL, "--space", "gradiopool/conformance",
			"--private-space", "gradiopool/private", "--hf-token", "hf_conformance")
		sleepy := gradiotest.NewServer(nil)
		t.Cleanup(sleepy.Close)
		hub.AddSpace("gradiopool/sleepy", sleepy)
		hub.SetWakeDelay(300 * time.Millisecond) // usually still asleep at the first status poll
		hub.SetStage("gradiopool/sleepy", gradiotest.StageSleeping)
		args = append(args, "--sleeping-space", "gradiopool/sleepy")
	} else if u := os.Getenv(envConformanceAuthURL); u != "" {
		args = append(args, "--auth-url", u, "--auth", os.Getenv(envConformanceAuth))
	}
	seen := runJSSuite(t, sim, args...)
	if !seen["wire/record"] {
		t.Error(`conformance.mjs reported no "wire/record" check`)
		return
	}
	t.Run("wire", func(t *testing.T) { checkRecordedWire(t, wireFile) })
}

// TestJSClientConformanceModes runs the official client's checks against the
// simulator's other generations that @gradio/client 2.7.0 supports: Gradio 6
// and Gradio 4.22-4.44 (sse_v3 without the /gradio_api prefix). There are no
// real captures of those, so only the client-visible behaviour is checked,
// not the wire. (2.7.0 cannot finish calls on sse_v1/v2/v2.1 or sse v0; see
// the transcripts' README.)
func TestJSClientConformanceModes(t *testing.T) {
	if os.Getenv(envConformanceURL) != "" {
		t.Skip("runs against the simulator only")
	}
	nodeSuite(t)
	for _, tc := range []struct {
		mode      gradiotest.Mode
		prefix    string
		versionRe string
	}{
		{gradiotest.Gradio6, "/gradio_api", `^6\.`},
		{gradiotest.Gradio4SSEv3, "", `^4\.`},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			srv := gradiotest.NewUnstartedServer(nil)
			srv.Mode = tc.mode
			srv.StepDelay = 5 * time.Millisecond
			srv.Start()
			t.Cleanup(srv.Close)
			runJSSuite(t, true, srv.URL, "--sim", "--api-prefix", tc.prefix, "--version-re", tc.versionRe)
		})
	}
}

func hasWaitingSkips(results []jsResult, sim bool) bool {
	for _, r := range results {
		if _, ok := waitingOnSim[r.Name]; ok && !r.OK && sim {
			return true
		}
	}
	return false
}

// recordedWire is what conformance.mjs --wire-out writes.
type recordedWire struct {
	ClientVersion string `json:"client_version"`
	ProxyURL      string `json:"proxy_url"`
	SessionHash   string `json:"session_hash"`
	ConfigRoot    string `json:"config_root"`
	Exchanges     []struct {
		Seq        int                        `json:"seq"`
		Method     string                     `json:"method"`
		Target     string                     `json:"target"`
		ReqHeaders map[string]json.RawMessage `json:"req_headers"`
		ReqBody    string                     `json:"req_body"`
		Status     int                        `json:"status"`
		ResHeaders map[string]json.RawMessage `json:"res_headers"`
		ResBody    string                     `json:"res_body"`
		SSE        []string                   `json:"sse"`
		Ended      bool                       `json:"ended"`
	} `json:"exchanges"`
}

func headerValue(h map[string]json.RawMessage, k string) string {
	var s string
	if json.Unmarshal(h[k], &s) == nil {
		return s
	}
	var ss []string
	_ = json.Unmarshal(h[k], &ss)
	return strings.Join(ss, ", ")
}

var fileTarget = regexp.MustCompile(`file=.*$`)

func templateRequest(method, target, session string) string {
	if session != "" {
		target = strings.ReplaceAll(target, session, "{session}")
	}
	return method + " " + fileTarget.ReplaceAllString(target, "file={path}")
}

func mediaType(v string) string {
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return v
	}
	return mt
}

// checkRecordedWire compares what the JS client exchanged with the app (via
// the logging proxy) with the real capture of the same scenario.
func checkRecordedWire(t *testing.T, file string) {
	exp := loadExpectations(t)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rec recordedWire
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("%s: %v", file, err)
	}

	t.Run("root_follows_host", func(t *testing.T) {
		// Gradio computes config.root from the request's Host header, so a
		// client behind a proxy keeps talking to the proxy.
		if rec.ConfigRoot != rec.ProxyURL {
			t.Errorf("config.root = %q through a proxy at %q; real Gradio answers the proxy's address (Host header)", rec.ConfigRoot, rec.ProxyURL)
		}
	})

	type exch = struct {
		tmpl string
		i    int
	}
	var got, want []exch
	heartbeats := 0
	infoAt, heartbeatAt := -1, -1
	for i, e := range rec.Exchanges {
		tm := templateRequest(e.Method, e.Target, rec.SessionHash)
		switch {
		case strings.Contains(tm, "/heartbeat/"):
			heartbeats++
			heartbeatAt = i
			continue
		case strings.HasSuffix(tm, "/info"):
			infoAt = i
		}
		got = append(got, exch{tm, i})
	}
	for i, e := range exp.WireAll {
		if strings.Contains(e.Request, "/heartbeat/") {
			continue
		}
		want = append(want, exch{e.Request, i})
	}
	// A join may ride on the data stream that is still open (see "calls"),
	// so data-stream GETs are compared apart from the rest of the sequence.
	isData := func(e exch) bool { return strings.Contains(e.tmpl, "/queue/data?") }
	gotData := slices.DeleteFunc(slices.Clone(got), func(e exch) bool { return !isData(e) })
	wantData := slices.DeleteFunc(slices.Clone(want), func(e exch) bool { return !isData(e) })
	got = slices.DeleteFunc(got, isData)
	want = slices.DeleteFunc(want, isData)

	t.Run("request_sequence", func(t *testing.T) {
		g := make([]string, len(got))
		for i, e := range got {
			g[i] = e.tmpl
		}
		w := make([]string, len(want))
		for i, e := range want {
			w[i] = e.tmpl
		}
		if !slices.Equal(g, w) {
			t.Errorf("requests (heartbeat aside)\n got %q\nwant %q", g, w)
		}
		if len(gotData) == 0 || len(gotData) > len(wantData) {
			t.Errorf("%d data-stream GETs, want 1 to %d (one per call unless a stream is still open)", len(gotData), len(wantData))
		}
		for _, e := range gotData {
			if e.tmpl != wantData[0].tmpl {
				t.Errorf("data stream request %q, want %q", e.tmpl, wantData[0].tmpl)
			}
		}
		if heartbeats != 1 || heartbeatAt < infoAt {
			t.Errorf("want exactly one GET /gradio_api/heartbeat/{session} after GET /gradio_api/info, got %d (at %d, info at %d)", heartbeats, heartbeatAt, infoAt)
		}
	})

	t.Run("response_headers", func(t *testing.T) {
		got, want := got, want
		if len(gotData) > 0 && len(wantData) > 0 {
			// data streams are alike; check the first against the capture's
			got = append(slices.Clone(got), gotData[0])
			want = append(slices.Clone(want), wantData[0])
		}
		for k := 0; k < len(got) && k < len(want); k++ {
			ge := rec.Exchanges[got[k].i]
			we := exp.WireAll[want[k].i]
			if got[k].tmpl != want[k].tmpl {
				break // reported by request_sequence
			}
			if ge.Status != we.Status {
				t.Errorf("%s: status %d, want %d", got[k].tmpl, ge.Status, we.Status)
			}
			for _, h := range []string{"content-type", "content-disposition", "accept-ranges"} {
				wv, ok := we.ResHeaders[h]
				if !ok {
					continue
				}
				gv := headerValue(ge.ResHeaders, h)
				if h == "content-type" {
					gv, wv = mediaType(gv), mediaType(wv)
				} else if h == "content-disposition" {
					gv, _, _ = strings.Cut(gv, ";")
					wv, _, _ = strings.Cut(wv, ";")
				}
				if gv != wv {
					t.Errorf("%s: %s %q, want %q", got[k].tmpl, h, gv, wv)
				}
			}
		}
	})

	t.Run("streams_end_with_close_stream", func(t *testing.T) {
		n := 0
		for _, e := range rec.Exchanges {
			if !strings.Contains(e.Target, "/queue/data") {
				continue
			}
			n++
			if !e.Ended || len(e.SSE) == 0 || !strings.Contains(e.SSE[len(e.SSE)-1], `"msg":"close_stream"`) {
				last := ""
				if len(e.SSE) > 0 {
					last = e.SSE[len(e.SSE)-1]
				}
				t.Errorf("data stream #%d: ended %v, last message %s; want it to end right after close_stream", e.Seq, e.Ended, last)
			}
			for _, s := range e.SSE[:max(0, len(e.SSE)-1)] {
				if strings.Contains(s, `"msg":"close_stream"`) {
					t.Errorf("data stream #%d: close_stream before its last message", e.Seq)
				}
			}
		}
		if n == 0 {
			t.Error("no GET /queue/data")
		}
	})

	t.Run("calls", func(t *testing.T) {
		var calls []int // indexes of joins
		for i, e := range rec.Exchanges {
			if e.Method == "POST" && strings.HasSuffix(e.Target, "/queue/join") {
				calls = append(calls, i)
			}
		}
		if len(calls) != len(exp.CallsAll) {
			t.Fatalf("%d queue joins, want %d as in the capture", len(calls), len(exp.CallsAll))
		}
		for n, ji := range calls {
			want := exp.CallsAll[n]
			t.Run(fmt.Sprintf("%d_%s", n, want.APIName), func(t *testing.T) {
				join := rec.Exchanges[ji]
				jr := mustObject(t, []byte(join.ResBody), "join response")
				if !slices.Equal(jr.keys, []string{"event_id"}) || !eventIDPattern.MatchString(jr.str("event_id")) {
					t.Errorf("join response %s, want {\"event_id\":<32 hex>}", join.ResBody)
				}
				// The messages of this event, from whichever data stream
				// carried them: when the next join reaches the server before
				// it has checked the pending set after a process_completed,
				// the open stream carries the next event too (no close_stream
				// in between, and no new GET). Real Gradio has the same window.
				id := jr.str("event_id")
				var data []json.RawMessage
				for _, e := range rec.Exchanges {
					if !strings.Contains(e.Target, "/queue/data") {
						continue
					}
					for _, s := range e.SSE {
						var head struct {
							EventID string `json:"event_id"`
						}
						if json.Unmarshal([]byte(s), &head) == nil && head.EventID == id {
							data = append(data, json.RawMessage(s))
						}
					}
				}
				want := want
				want.Messages = slices.DeleteFunc(slices.Clone(want.Messages), func(m json.RawMessage) bool {
					o, err := parseObject(m)
					return err == nil && o.str("msg") == "close_stream"
				})
				cc := callCheck{root: rec.ConfigRoot, gradio6: strings.HasPrefix(recordedVersion(rec), "6.")}
				switch want.APIName {
				case "slow":
					cc.wantData = json.RawMessage(`["slept 0.05s"]`)
				case "reverse_file":
					cc.fileOutput = true
				}
				compareMessages(t, data, jr.str("event_id"), want, cc)
			})
		}
	})
}

var eventIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// recordedVersion is the Gradio version in the recorded GET /config answer.
func recordedVersion(rec recordedWire) string {
	for _, e := range rec.Exchanges {
		if e.Method == "GET" && strings.HasSuffix(e.Target, "/config") {
			var c struct {
				Version string `json:"version"`
			}
			if json.Unmarshal([]byte(e.ResBody), &c) == nil {
				return strings.TrimSpace(c.Version)
			}
		}
	}
	return ""
}

// ---------------------------------------------------------------- raw wire

// TestConformanceRawWire compares what the app sends to a plain HTTP client
// with the real Gradio 5.49.1 captures.
func TestConformanceRawWire(t *testing.T) {
	exp := loadExpectations(t)
	base, srv := conformanceTarget(t)
	sim := srv != nil
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections) // keep goleak quiet against an external app
	hc := &http.Client{Transport: tr}

	var cfg object
	t.Run("config", func(t *testing.T) {
		res, body := rawDo(t, hc, "GET", base+"/config", "", nil)
		wantMediaType(t, res, "application/json")
		cfg = mustObject(t, body, "/config")
		checkConfig(t, exp, cfg, sim)
	})
	if cfg.m == nil {
		t.Fatal("no config")
	}
	root := cfg.str("root")
	prefix := cfg.str("api_prefix")
	if prefix != "/gradio_api" {
		t.Fatalf("api_prefix %q, want /gradio_api", prefix)
	}
	api := base + prefix

	t.Run("config_exact", func(t *testing.T) {
		// An app of the captured Gradio version serves the very same
		// components, dependencies and layout as the capture (values too), but
		// for the one prop that prints a Python object address.
		if v := strings.TrimSpace(cfg.str("version")); v != exp.GradioVersion {
			t.Skipf("version %s: exact comparison only against %s", v, exp.GradioVersion)
		}
		if !sim && !sameAppAsCapture(cfg, exp) {
			t.Skipf("title %q: exact comparison only against the captured app (%s)", cfg.str("title"), researchAppSource)
		}
		// component_class_id is a hash Gradio derives from where the
		// component's class is installed, so it differs per installation;
		// what holds everywhere is checked apart: one 64-hex id per class.
		scrub := func(classIDs map[string]string, raw json.RawMessage) any {
			var v any
			_ = json.Unmarshal(raw, &v)
			if m, ok := v.(map[string]any); ok {
				if p, ok := m["props"].(map[string]any); ok {
					delete(p, "delete_callback")
				}
				id, _ := m["component_class_id"].(string)
				typ, _ := m["type"].(string)
				if !classIDPattern.MatchString(id) {
					t.Errorf("component %v (%s): component_class_id %q, want 64 hex digits", m["id"], typ, id)
				} else if prev, ok := classIDs[typ]; ok && prev != id {
					t.Errorf("components of type %s have different component_class_ids %s and %s", typ, prev, id)
				}
				classIDs[typ] = id
				delete(m, "component_class_id")
			}
			return v
		}
		var comps []json.RawMessage
		_ = json.Unmarshal(cfg.m["components"], &comps)
		if len(comps) != len(exp.FullComponents) {
			t.Errorf("%d components, want %d", len(comps), len(exp.FullComponents))
		}
		gotIDs, wantIDs := map[string]string{}, map[string]string{}
		for i := 0; i < len(comps) && i < len(exp.FullComponents); i++ {
			if g, w := scrub(gotIDs, comps[i]), scrub(wantIDs, exp.FullComponents[i]); !reflect.DeepEqual(g, w) {
				t.Errorf("component #%d\n got %s\nwant %s", i, compact(comps[i]), compact(exp.FullComponents[i]))
			}
		}
		if !jsonEqual(cfg.m["dependencies"], exp.FullDeps) {
			t.Errorf("dependencies\n got %s\nwant %s", compact(cfg.m["dependencies"]), compact(exp.FullDeps))
		}
		if !jsonEqual(cfg.m["layout"], exp.FullLayout) {
			t.Errorf("layout\n got %s\nwant %s", compact(cfg.m["layout"]), compact(exp.FullLayout))
		}
	})

	t.Run("info", func(t *testing.T) {
		res, body := rawDo(t, hc, "GET", api+"/info", "", nil)
		wantMediaType(t, res, "application/json")
		checkInfo(t, exp.Info, body)
		if v := strings.TrimSpace(cfg.str("version")); v == exp.GradioVersion && (sim || sameAppAsCapture(cfg, exp)) && !jsonEqual(body, exp.Info) {
			// same Gradio version: the whole document, descriptions and
			// schemas included, is the capture's
			t.Errorf("/info differs from the capture's (Gradio %s)\n got %s\nwant %s", v, compact(body), compact(exp.Info))
		}
	})

	t.Run("unknown_session_stream", func(t *testing.T) {
		// Gradio answers a data stream opened before any join with 200 and
		// one unexpected_error, session_not_found true.
		msgs, res := readStream(t, hc, api+"/queue/data?session_hash=never-joined-"+randHex(t))
		wantMediaType(t, res, "text/event-stream")
		if len(msgs) == 0 {
			t.Fatal("no message")
		}
		m := mustObject(t, msgs[0], "message")
		wantKeys := []string{"msg", "event_id", "message", "session_not_found", "success"}
		if m.str("msg") != "unexpected_error" || !slices.Equal(m.keys, wantKeys) || string(m.m["session_not_found"]) != "true" {
			t.Errorf("got %s, want unexpected_error with fields %v and session_not_found true", msgs[0], wantKeys)
		}
	})

	t.Run("heartbeat", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", api+"/heartbeat/"+randHex(t), nil)
		req.Header.Set("Accept", "text/event-stream")
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		wantMediaType(t, res, "text/event-stream")
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		if err != nil || strings.TrimRight(line, "\r\n") != "data: ALIVE" {
			t.Errorf("first line %q (%v), want \"data: ALIVE\"", line, err)
		}
	})

	t.Run("heartbeat_message", func(t *testing.T) {
		// From Gradio's source (not in the captures): a running session's
		// data stream carries {"msg":"heartbeat","event_id":null} every
		// GRADIO_HEARTBEAT_INTERVAL (15 s). The simulator's interval is
		// shortened for this check; waiting 15 s on a real app is skipped.
		if !sim {
			t.Skip("needs the simulator's heartbeat_interval knob")
		}
		was := srv.CurrentKnobs().HeartbeatInterval
		srv.UpdateKnobs(func(k *gradiotest.Knobs) { k.HeartbeatInterval = 10 * time.Millisecond })
		defer srv.UpdateKnobs(func(k *gradiotest.Knobs) { k.HeartbeatInterval = was })
		s := randHex(t)[:11]
		fn := fnIndex(t, exp, "slow")
		body := fmt.Sprintf(`{"data":[600],"event_data":null,"fn_index":%d,"trigger_id":null,"session_hash":%q}`, fn, s)
		res, jb := rawDo(t, hc, "POST", api+"/queue/join", "application/json", strings.NewReader(body))
		if res.StatusCode != 200 {
			t.Fatalf("join: %d %s", res.StatusCode, jb)
		}
		eventID := mustObject(t, jb, "join").str("event_id")
		ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
		defer cancel()
		stream, err := openStream(ctx, hc, api+"/queue/data?session_hash="+s)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		for {
			m, err := stream.next()
			if err != nil {
				t.Fatalf("stream ended before a heartbeat: %v", err)
			}
			o := mustObject(t, m, "message")
			if o.str("msg") != "heartbeat" {
				continue
			}
			if !slices.Equal(o.keys, []string{"msg", "event_id"}) || !o.isNull("event_id") {
				t.Errorf("heartbeat %s, want {\"msg\":\"heartbeat\",\"event_id\":null}", m)
			}
			break
		}
		cbody := fmt.Sprintf(`{"event_id":%q,"session_hash":%q,"fn_index":%d}`, eventID, s, fn)
		rawDo(t, hc, "POST", api+"/cancel", "application/json", strings.NewReader(cbody))
	})

	// The calls of the all-endpoints capture, in its order, on one session.
	session := randHex(t)[:11]
	for n, want := range exp.CallsAll {
		t.Run(fmt.Sprintf("call/%d_%s", n, want.APIName), func(t *testing.T) {
			// The JS client's join body of the capture, on our session.
			req := mustObject(t, want.Request, "join body")
			req.m["session_hash"], _ = json.Marshal(session)
			cc := callCheck{root: root, gradio6: strings.HasPrefix(strings.TrimSpace(cfg.str("version")), "6.")}
			switch want.APIName {
			case "slow":
				req.m["data"] = json.RawMessage(`[0.05]`)
				cc.wantData = json.RawMessage(`["slept 0.05s"]`)
			case "reverse_file":
				path := rawUpload(t, hc, api, "blob", []byte("hello file payload 123\n"))
				req.m["data"], _ = json.Marshal([]any{map[string]any{"path": path, "meta": map[string]any{"_type": "gradio.FileData"}}})
				cc.fileOutput = true
			}
			body := compactObj(req)
			res, jb := rawDo(t, hc, "POST", api+"/queue/join", "application/json", strings.NewReader(body))
			if res.StatusCode != 200 {
				t.Fatalf("join: %d %s", res.StatusCode, jb)
			}
			wantMediaType(t, res, "application/json")
			jr := mustObject(t, jb, "join response")
			if !slices.Equal(jr.keys, []string{"event_id"}) || !eventIDPattern.MatchString(jr.str("event_id")) {
				t.Errorf("join response %s, want {\"event_id\":<32 hex>}", jb)
			}
			msgs, sres := readStream(t, hc, api+"/queue/data?session_hash="+session)
			wantMediaType(t, sres, "text/event-stream")
			compareMessages(t, msgs, jr.str("event_id"), want, cc)
			if want.APIName == "reverse_file" {
				checkDownload(t, hc, exp, msgs, "\n321 daolyap elif olleh")
			}
		})
	}

	t.Run("cancel", func(t *testing.T) {
		// From Gradio's source (not in the captures): cancel of a
		// running event answers {"success":true} and ends the event with a
		// synthetic process_completed whose output is {}.
		s := randHex(t)[:11]
		fn := fnIndex(t, exp, "slow")
		before := 0
		if sim {
			before = srv.Executions("slow")
		}
		body := fmt.Sprintf(`{"data":[600],"event_data":null,"fn_index":%d,"trigger_id":null,"session_hash":%q}`, fn, s)
		res, jb := rawDo(t, hc, "POST", api+"/queue/join", "application/json", strings.NewReader(body))
		if res.StatusCode != 200 {
			t.Fatalf("join: %d %s", res.StatusCode, jb)
		}
		eventID := mustObject(t, jb, "join").str("event_id")
		ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
		defer cancel()
		stream, err := openStream(ctx, hc, api+"/queue/data?session_hash="+s)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		var seen []string
		for {
			m, err := stream.next()
			if err != nil {
				t.Fatalf("stream ended before process_starts: %v (seen %v)", err, seen)
			}
			o := mustObject(t, m, "message")
			seen = append(seen, o.str("msg"))
			if o.str("msg") == "process_starts" {
				break
			}
		}
		cbody := fmt.Sprintf(`{"event_id":%q,"session_hash":%q,"fn_index":%d}`, eventID, s, fn)
		cres, cb := rawDo(t, hc, "POST", api+"/cancel", "application/json", strings.NewReader(cbody))
		if cres.StatusCode != 200 || !jsonEqual(cb, []byte(`{"success":true}`)) {
			t.Errorf("cancel: %d %s, want 200 {\"success\":true}", cres.StatusCode, cb)
		}
		var rest []object
		for {
			m, err := stream.next()
			if err != nil {
				break
			}
			o := mustObject(t, m, "message")
			if o.str("msg") == "heartbeat" {
				continue
			}
			rest = append(rest, o)
			if o.str("msg") == "close_stream" {
				break
			}
		}
		if len(rest) != 2 || rest[0].str("msg") != "process_completed" || rest[1].str("msg") != "close_stream" {
			t.Fatalf("after cancel got %v, want [process_completed close_stream]", msgTypes(rest))
		}
		pc := rest[0]
		if pc.str("event_id") != eventID || compact(pc.m["output"]) != "{}" || string(pc.m["success"]) != "true" {
			t.Errorf("synthetic completion %v %s, want event_id %s, output {}, success true", pc.keys, compactObj(pc), eventID)
		}
		rres, rb := rawDo(t, hc, "POST", api+"/reset", "application/json", strings.NewReader(fmt.Sprintf(`{"event_id":%q}`, eventID)))
		if rres.StatusCode != 200 || !jsonEqual(rb, []byte(`{"success":true}`)) {
			t.Errorf("reset: %d %s, want 200 {\"success\":true}", rres.StatusCode, rb)
		}
		if sim {
			if after := srv.Executions("slow"); after != before+1 {
				t.Errorf("slow started %d times during the test, want 1", after-before)
			}
			// The handler must really stop. Poll the simulator's running
			// count; the bound is a hang guard, not a timing assertion.
			deadline := time.Now().Add(rawTimeout)
			for srv.Snapshot().Running != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the cancelled slow job still runs after %v", rawTimeout)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
}

// researchAppSource is the app whose real traffic the captures recorded.
const researchAppSource = "testdata/realgradio/research_app.py"

var classIDPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// sameAppAsCapture reports whether a real app under test is the captured
// one (by its title; the simulator serves the captured app under its own
// title): other apps with the six endpoints, such as a plain
// six-tab layout, serve the same API with other component ids, labels and
// descriptions, so only the captured app can be compared value for value.
func sameAppAsCapture(cfg object, exp *expectations) bool {
	var want string
	_ = json.Unmarshal(exp.Config["title"], &want)
	return want != "" && cfg.str("title") == want
}

func compactObj(o object) string {
	var parts []string
	for _, k := range o.keys {
		parts = append(parts, fmt.Sprintf("%q:%s", k, compact(o.m[k])))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func fnIndex(t *testing.T, exp *expectations, api string) int {
	t.Helper()
	for _, d := range exp.Dependencies {
		if d.APIName == api {
			return d.ID
		}
	}
	t.Fatalf("no dependency %q", api)
	return -1
}

func checkConfig(t *testing.T, exp *expectations, cfg object, sim bool) {
	t.Helper()
	version := strings.TrimSpace(cfg.str("version"))
	gradio6 := strings.HasPrefix(version, "6.")
	if !strings.HasPrefix(version, "5.") && !gradio6 {
		t.Errorf("version %q, want Gradio 5.x or 6.x", version)
	}
	for _, k := range exp.ConfigKeys {
		if k == "show_api" && gradio6 {
			continue // replaced by api_visibility in 6.x
		}
		if _, ok := cfg.m[k]; !ok {
			t.Errorf("config lacks %q (present in real Gradio %s)", k, exp.GradioVersion)
		}
	}
	for _, k := range []string{"protocol", "api_prefix", "enable_queue", "connect_heartbeat", "space_id", "username"} {
		if !jsonEqual(cfg.m[k], exp.Config[k]) {
			t.Errorf("config %s = %s, want %s", k, cfg.m[k], exp.Config[k])
		}
	}
	if _, ok := cfg.m["max_file_size"]; !ok {
		t.Errorf("config lacks max_file_size")
	}
	// app_id is a random uint64 (often above 2^63).
	var id uint64
	if err := json.Unmarshal(cfg.m["app_id"], &id); err != nil {
		t.Errorf("app_id %s is not a uint64: %v", cfg.m["app_id"], err)
	}

	var comps []json.RawMessage
	if err := json.Unmarshal(cfg.m["components"], &comps); err != nil {
		t.Fatalf("components: %v", err)
	}
	compType := map[int]string{}
	for _, c := range comps {
		o := mustObject(t, c, "component")
		var cid int
		_ = json.Unmarshal(o.m["id"], &cid)
		compType[cid] = o.str("type")
		var skip bool
		_ = json.Unmarshal(o.m["skip_api"], &skip)
		wantKeys := exp.ComponentKeys
		if skip {
			wantKeys = exp.LayoutCompKeys
		}
		for _, k := range wantKeys {
			if _, ok := o.m[k]; !ok {
				t.Errorf("component %d (%s) lacks %q", cid, o.str("type"), k)
			}
		}
		if o.str("type") == "state" && !skip {
			t.Errorf("state component %d has skip_api false", cid)
		}
	}
	wantType := map[int]string{}
	for _, c := range exp.Components {
		wantType[c.ID] = c.Type
	}

	var deps []json.RawMessage
	if err := json.Unmarshal(cfg.m["dependencies"], &deps); err != nil {
		t.Fatalf("dependencies: %v", err)
	}
	byName := map[string]object{}
	for _, d := range deps {
		o := mustObject(t, d, "dependency")
		byName[o.str("api_name")] = o
	}
	for _, wd := range exp.Dependencies {
		d, ok := byName[wd.APIName]
		if !ok {
			t.Errorf("no dependency with api_name %q", wd.APIName)
			continue
		}
		for _, k := range exp.DependencyKeys {
			if k == "show_api" && gradio6 {
				k = "api_visibility"
			}
			if k == "like_user_message" && gradio6 {
				continue // gone in Gradio 6 (6.25.0 measured)
			}
			if _, ok := d.m[k]; !ok {
				t.Errorf("dependency %s lacks %q", wd.APIName, k)
			}
		}
		var got expDependency
		_ = json.Unmarshal(rawObject(d), &got)
		if got.ID != wd.ID {
			t.Errorf("dependency %s id %d, want %d (fn_index order of the capture)", wd.APIName, got.ID, wd.ID)
		}
		if got.BackendFn != wd.BackendFn || got.Types != wd.Types || got.Connection != wd.Connection || !jsonEqual(got.Queue, wd.Queue) {
			t.Errorf("dependency %s: backend_fn %v types %+v connection %q queue %s; want %v %+v %q %s",
				wd.APIName, got.BackendFn, got.Types, got.Connection, got.Queue, wd.BackendFn, wd.Types, wd.Connection, wd.Queue)
		}
		types := func(ids []int, m map[int]string) []string {
			s := make([]string, len(ids))
			for i, id := range ids {
				s[i] = m[id]
			}
			return s
		}
		if g, w := types(got.Inputs, compType), types(wd.Inputs, wantType); !slices.Equal(g, w) {
			t.Errorf("dependency %s input components %v, want %v", wd.APIName, g, w)
		}
		if g, w := types(got.Outputs, compType), types(wd.Outputs, wantType); !slices.Equal(g, w) {
			t.Errorf("dependency %s output components %v, want %v", wd.APIName, g, w)
		}
	}
}

func rawObject(o object) []byte {
	b, _ := json.Marshal(o.m)
	return b
}

func checkInfo(t *testing.T, want, got json.RawMessage) {
	t.Helper()
	g := mustObject(t, got, "/info")
	w := mustObject(t, want, "expected info")
	if !slices.Equal(g.keys, w.keys) {
		t.Errorf("info keys %v, want %v", g.keys, w.keys)
	}
	gn := mustObject(t, g.m["named_endpoints"], "named_endpoints")
	wn := mustObject(t, w.m["named_endpoints"], "named_endpoints")
	if !slices.Equal(gn.keys, wn.keys) {
		t.Errorf("named endpoints %v, want %v", gn.keys, wn.keys)
	}
	if !jsonEqual(g.m["unnamed_endpoints"], w.m["unnamed_endpoints"]) {
		t.Errorf("unnamed_endpoints %s, want %s", g.m["unnamed_endpoints"], w.m["unnamed_endpoints"])
	}
	for _, ep := range wn.keys {
		if _, ok := gn.m[ep]; !ok {
			continue
		}
		ge := mustObject(t, gn.m[ep], ep)
		we := mustObject(t, wn.m[ep], ep)
		for _, k := range we.keys {
			if _, ok := ge.m[k]; !ok && !(k == "show_api" && ge.m["api_visibility"] != nil) {
				t.Errorf("%s lacks %q", ep, k)
			}
		}
		compareParams(t, ep+" parameters", ge.m["parameters"], we.m["parameters"],
			[]string{"label", "parameter_name", "parameter_has_default", "parameter_default", "component"})
		compareParams(t, ep+" returns", ge.m["returns"], we.m["returns"], []string{"label", "component"})
	}
}

func compareParams(t *testing.T, what string, got, want json.RawMessage, exact []string) {
	t.Helper()
	var g, w []json.RawMessage
	_ = json.Unmarshal(got, &g)
	_ = json.Unmarshal(want, &w)
	if len(g) != len(w) {
		t.Errorf("%s: %d, want %d (gr.State is not listed)", what, len(g), len(w))
		return
	}
	for i := range w {
		gp := mustObject(t, g[i], what)
		wp := mustObject(t, w[i], what)
		if !slices.Equal(gp.keys, wp.keys) {
			t.Errorf("%s[%d] fields %v, want %v", what, i, gp.keys, wp.keys)
		}
		for _, k := range exact {
			if !jsonEqual(gp.m[k], wp.m[k]) {
				t.Errorf("%s[%d].%s = %s, want %s", what, i, k, gp.m[k], wp.m[k])
			}
		}
		gpt := mustObject(t, gp.m["python_type"], "python_type")
		wpt := mustObject(t, wp.m["python_type"], "python_type")
		if gpt.str("type") != wpt.str("type") {
			t.Errorf("%s[%d].python_type.type = %q, want %q", what, i, gpt.str("type"), wpt.str("type"))
		}
		gt := mustObject(t, gp.m["type"], "type")
		wt := mustObject(t, wp.m["type"], "type")
		if wt.str("title") == "FileData" {
			if gt.str("title") != "FileData" || !jsonEqual(gt.m["required"], wt.m["required"]) {
				t.Errorf("%s[%d].type is not the FileData schema: %.200s", what, i, gp.m["type"])
			}
		} else if !jsonEqual(gp.m["type"], wp.m["type"]) {
			t.Errorf("%s[%d].type = %s, want %s", what, i, gp.m["type"], wp.m["type"])
		}
	}
}

func checkDownload(t *testing.T, hc *http.Client, exp *expectations, msgs []json.RawMessage, wantBody string) {
	t.Helper()
	var url string
	for _, m := range msgs {
		o := mustObject(t, m, "message")
		if o.str("msg") != "process_completed" {
			continue
		}
		var out struct {
			Data []struct {
				URL string `json:"url"`
			} `json:"data"`
		}
		_ = json.Unmarshal(o.m["output"], &out)
		if len(out.Data) == 1 {
			url = out.Data[0].URL
		}
	}
	if url == "" {
		t.Error("no file URL in the result")
		return
	}
	res, body := rawDo(t, hc, "GET", url, "", nil)
	if res.StatusCode != exp.DownloadHeaders.Status {
		t.Errorf("download %s: %d, want %d", url, res.StatusCode, exp.DownloadHeaders.Status)
	}
	if string(body) != wantBody {
		t.Errorf("downloaded %q, want %q", body, wantBody)
	}
	for _, h := range []string{"content-type", "accept-ranges"} {
		if g, w := res.Header.Get(h), exp.DownloadHeaders.Headers[h]; mediaType(g) != mediaType(w) {
			t.Errorf("download %s %q, want %q", h, g, w)
		}
	}
	gd, _, _ := strings.Cut(res.Header.Get("content-disposition"), ";")
	wd, _, _ := strings.Cut(exp.DownloadHeaders.Headers["content-disposition"], ";")
	if gd != wd {
		t.Errorf("download content-disposition %q, want %q...", res.Header.Get("content-disposition"), wd)
	}
}

// ---------------------------------------------------------------- raw HTTP helpers

func randHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func rawDo(t *testing.T, hc *http.Client, method, url, contentType string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return res, b
}

func wantMediaType(t *testing.T, res *http.Response, want string) {
	t.Helper()
	if got := mediaType(res.Header.Get("Content-Type")); got != want {
		t.Errorf("%s %s: Content-Type %q, want %s", res.Request.Method, res.Request.URL.Path, res.Header.Get("Content-Type"), want)
	}
}

func rawUpload(t *testing.T, hc *http.Client, api, filename string, content []byte) string {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("files", filename)
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(content)
	mw.Close()
	res, body := rawDo(t, hc, "POST", api+"/upload", mw.FormDataContentType(), &buf)
	if res.StatusCode != 200 {
		t.Fatalf("upload: %d %s", res.StatusCode, body)
	}
	wantMediaType(t, res, "application/json")
	var paths []string
	if err := json.Unmarshal(body, &paths); err != nil || len(paths) != 1 {
		t.Fatalf("upload answer %s, want a JSON array of one path", body)
	}
	return paths[0]
}

// sseStream reads data records from a text/event-stream body.
type sseStream struct {
	res *http.Response
	br  *bufio.Reader
	odd []string // lines other than "data: ..." and blank
}

func openStream(ctx context.Context, hc *http.Client, url string) (*sseStream, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != 200 {
		res.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, res.Status)
	}
	return &sseStream{res: res, br: bufio.NewReaderSize(res.Body, 1<<16)}, nil
}

// next returns the data of the next SSE record.
func (s *sseStream) next() (json.RawMessage, error) {
	var data []string
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			if len(data) > 0 && line == "" {
				return json.RawMessage(strings.Join(data, "\n")), nil
			}
			return nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if len(data) > 0 {
				return json.RawMessage(strings.Join(data, "\n")), nil
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, v)
		} else {
			// Real Gradio frames every record as "data: <json>\n\n" only;
			// gradio_client's strict parser breaks on anything else.
			s.odd = append(s.odd, line)
		}
	}
}

func (s *sseStream) Close() { s.res.Body.Close() }

// readStream reads a data stream until close_stream or its end.
func readStream(t *testing.T, hc *http.Client, url string) ([]json.RawMessage, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
	defer cancel()
	s, err := openStream(ctx, hc, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer func() {
		if len(s.odd) > 0 {
			t.Errorf("stream %s: lines other than \"data: <json>\": %q", url, s.odd)
		}
	}()
	var msgs []json.RawMessage
	for {
		m, err := s.next()
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("stream %s: no end after %v (hang guard); got %d messages", url, rawTimeout, len(msgs))
			}
			return msgs, s.res
		}
		msgs = append(msgs, m)
		var head struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal(m, &head) == nil && (head.Msg == "close_stream" || head.Msg == "unexpected_error") {
			return msgs, s.res
		}
	}
}
