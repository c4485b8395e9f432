package gradio_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

// exchange is one recorded request and its response.
type exchange struct {
	n         int
	method    string
	path      string // without query
	reqBody   string
	status    int
	ctype     string
	body      string
	truncated bool
	stream    []string // SSE lines as received
	isStream  bool
}

var (
	reqRe    = regexp.MustCompile(`^=== \[#(\d+)\] .* REQUEST (\S+) (\S+) HTTP`)
	respRe   = regexp.MustCompile(`^=== \[#(\d+)\] .* RESPONSE (\d+) `)
	bodyRe   = regexp.MustCompile(`^--- (?:\[#(\d+)\] .*)?(?:response )?body \((\d+) bytes\)`)
	chunkRe  = regexp.MustCompile(`^--- \[#(\d+)\] .* stream chunk`)
	streamRe = regexp.MustCompile(`^--- \[#(\d+)\] .* stream end`)
)

// parseTranscript reads the capture format of testdata/transcripts.
func parseTranscript(t testing.TB, name string) []*exchange {
	t.Helper()
	b, err := os.ReadFile("testdata/transcripts/" + name)
	if err != nil {
		t.Fatal(err)
	}
	byN := map[int]*exchange{}
	var order []*exchange
	lines := strings.Split(string(b), "\n")
	var cur *exchange
	inResp := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case reqRe.MatchString(l):
			m := reqRe.FindStringSubmatch(l)
			n, _ := strconv.Atoi(m[1])
			path, _, _ := strings.Cut(m[3], "?")
			cur = &exchange{n: n, method: m[2], path: path}
			byN[n] = cur
			order = append(order, cur)
			inResp = false
		case respRe.MatchString(l):
			m := respRe.FindStringSubmatch(l)
			n, _ := strconv.Atoi(m[1])
			cur = byN[n]
			cur.status, _ = strconv.Atoi(m[2])
			inResp = true
		case bodyRe.MatchString(l):
			m := bodyRe.FindStringSubmatch(l)
			size, _ := strconv.Atoi(m[2])
			if m[1] != "" {
				n, _ := strconv.Atoi(m[1])
				cur, inResp = byN[n], true
			}
			var sb strings.Builder
			for first := true; i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "=== [#") && !strings.HasPrefix(lines[i+1], "--- [#"); first = false {
				i++
				if !first {
					sb.WriteByte('\n')
				}
				sb.WriteString(lines[i])
			}
			body := sb.String()
			trunc := strings.Contains(body, "...<truncated")
			if len(body) >= size {
				body = body[:size]
			}
			if inResp {
				cur.body, cur.truncated = body, trunc
			} else {
				cur.reqBody = body
			}
		case chunkRe.MatchString(l):
			m := chunkRe.FindStringSubmatch(l)
			n, _ := strconv.Atoi(m[1])
			ex := byN[n]
			ex.isStream = true
			for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "  |") {
				i++
				ex.stream = append(ex.stream, strings.TrimPrefix(strings.TrimPrefix(lines[i], "  |"), " "))
			}
		case streamRe.MatchString(l):
		case strings.HasPrefix(l, "  ") && cur != nil && inResp:
			if k, v, ok := strings.Cut(strings.TrimSpace(l), ": "); ok && strings.EqualFold(k, "content-type") {
				cur.ctype = v
			}
		}
	}
	return order
}

// replayServer serves recorded exchanges in order, per method and path
// (session hashes in paths are normalised), and records what the client
// sent.
type replayServer struct {
	t    testing.TB
	mu   sync.Mutex
	left []*exchange
	got  []string // "METHOD path" in arrival order
	errs []error
}

func normPath(p string) string {
	if i := strings.Index(p, "/heartbeat/"); i >= 0 {
		return p[:i] + "/heartbeat/S"
	}
	return p
}

func (rs *replayServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rs.mu.Lock()
	key := r.Method + " " + normPath(r.URL.Path)
	rs.got = append(rs.got, key)
	var ex *exchange
	for i, e := range rs.left {
		if e.method+" "+normPath(e.path) == key {
			ex = e
			rs.left = append(rs.left[:i:i], rs.left[i+1:]...)
			break
		}
	}
	rs.mu.Unlock()
	if ex == nil {
		rs.fail(fmt.Errorf("unexpected request %s", key))
		http.Error(w, "not recorded", http.StatusNotFound)
		return
	}
	if ex.reqBody != "" && strings.HasPrefix(ex.reqBody, "{") {
		var want, got map[string]any
		body := new(bytes.Buffer)
		body.ReadFrom(r.Body)
		if json.Unmarshal([]byte(ex.reqBody), &want) == nil {
			if err := json.Unmarshal(body.Bytes(), &got); err != nil {
				rs.fail(fmt.Errorf("%s: body %q is not JSON", key, body))
			}
			for _, k := range []string{"data", "fn_index", "event_id"} {
				if _, ok := want[k]; !ok {
					continue
				}
				a, _ := json.Marshal(stripFileExtras(want[k]))
				b, _ := json.Marshal(stripFileExtras(got[k]))
				if !bytes.Equal(a, b) {
					rs.fail(fmt.Errorf("%s: %s = %s, recorded %s", key, k, b, a))
				}
			}
		}
	}
	if ex.ctype != "" {
		w.Header().Set("Content-Type", ex.ctype)
	}
	w.WriteHeader(ex.status)
	if ex.isStream {
		bw := bufio.NewWriter(w)
		for _, l := range ex.stream {
			bw.WriteString(l + "\n")
		}
		bw.Flush()
		return
	}
	w.Write([]byte(ex.body))
}

// stripFileExtras drops the optional FileData fields a client may add
// (orig_name, size, mime_type), so only path and meta are compared.
func stripFileExtras(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = stripFileExtras(e)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if _, isFile := x["path"]; isFile && (k == "orig_name" || k == "size" || k == "mime_type") {
				continue
			}
			out[k] = stripFileExtras(e)
		}
		return out
	}
	return v
}

func (rs *replayServer) fail(err error) {
	rs.mu.Lock()
	rs.errs = append(rs.errs, err)
	rs.mu.Unlock()
}

func (rs *replayServer) check(t testing.TB) {
	t.Helper()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, err := range rs.errs {
		t.Error(err)
	}
}

// fullConfig is the complete /config of the captured app (Gradio 5.49.1).
func fullConfig(t testing.TB) []byte {
	for _, ex := range parseTranscript(t, "gradio-5.49.1_jsclient-2.7.0_connect-predict-generator.txt") {
		if ex.path == "/config" && !ex.truncated {
			return []byte(ex.body)
		}
	}
	t.Fatal("no complete config")
	return nil
}

// legacyConfig rebuilds a 4.x config from the complete 5.49.1 one.
func legacyConfig(t testing.TB, version, protocol string) string {
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(fullConfig(t)))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	m["version"], m["protocol"] = version, protocol
	delete(m, "api_prefix")
	delete(m, "connect_heartbeat")
	b, _ := json.Marshal(m)
	return string(b)
}

func startReplay(t testing.TB, exs []*exchange) (*replayServer, string) {
	rs := &replayServer{t: t, left: exs}
	srv := httptest.NewServer(rs)
	t.Cleanup(srv.Close)
	return rs, srv.URL
}

func TestReplay(t *testing.T) {
	type call struct {
		ep      string
		args    []any
		want    string // JSON of outputs, or "error:" + substring
		partial []string
	}
	upload := gradio.FileReader("blob", strings.NewReader("hello file payload 123\n"))
	tests := []struct {
		file     string
		version  string // rebuild the config (4.x captures)
		protocol string
		calls    []call
	}{
		{file: "gradio-5.49.1_jsclient-2.7.0_connect-predict-generator.txt", calls: []call{
			{ep: "/upper", args: []any{"hello gradio"}, want: `["HELLO GRADIO"]`},
			{ep: "/count", args: []any{5}, want: `["0 1 2 3 4"]`, partial: []string{"0", "0 1", "0 1 2", "0 1 2 3", "0 1 2 3 4"}},
		}},
		{file: "gradio-5.49.1_jsclient-2.7.0_all-endpoints.txt", calls: []call{
			{ep: "/upper", args: []any{"hello gradio"}, want: `["HELLO GRADIO"]`},
			{ep: "/upper", args: []any{"second call"}, want: `["SECOND CALL"]`},
			{ep: "/count", args: []any{4}, want: `["0 1 2 3"]`},
			{ep: "/slow", args: []any{2}, want: `["slept 2.00s"]`},
			{ep: "/counter", args: []any{"apple"}, want: `["1 items: apple"]`},
			{ep: "/counter", args: []any{"banana"}, want: `["2 items: apple, banana"]`},
			{ep: "/fail", args: []any{"boom"}, want: "error:deliberate failure for input 'boom'"},
			{ep: "/reverse_file", args: []any{upload}, want: "file:\n321 daolyap elif olleh"},
			{ep: "/count", args: []any{5}, want: `["0 1 2 3 4"]`},
		}},
		{file: "gradio-4.16.0_pyclient-0.8.1_sse_v1.txt", version: "4.16.0", protocol: "sse_v1"},
		{file: "gradio-4.20.1_pyclient-0.11.0_sse_v2.txt", version: "4.20.1", protocol: "sse_v2"},
		{file: "gradio-4.8.0_pyclient-0.7.1_sse.txt", version: "4.8.0", protocol: "sse"},
	}
	legacyCalls := []call{
		{ep: "/upper", args: []any{"hello gradio"}, want: `["HELLO GRADIO"]`},
		{ep: "/count", args: []any{3}, want: `["0 1 2"]`, partial: []string{"0", "0 1", "0 1 2"}},
		{ep: "/counter", args: []any{"apple"}, want: `["1 items: apple"]`},
		{ep: "/counter", args: []any{"banana"}, want: `["2 items: apple, banana"]`},
		{ep: "/fail", args: []any{"boom"}, want: "error:deliberate failure"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			exs := parseTranscript(t, tt.file)
			calls := tt.calls
			if tt.version != "" {
				calls = legacyCalls
				var keep []*exchange
				for _, ex := range exs {
					switch {
					case ex.path == "/config":
						ex.body, ex.truncated = legacyConfig(t, tt.version, tt.protocol), false
					case ex.path == "/upload", strings.HasPrefix(ex.path, "/file="):
						continue // the Python client's file calls are not replayed
					}
					keep = append(keep, ex)
				}
				exs = keep
			} else {
				full := string(fullConfig(t))
				for _, ex := range exs {
					if ex.path == "/config" {
						ex.body, ex.truncated = full, false
					}
				}
			}
			rs, url := startReplay(t, exs)
			c := connect(t, url)
			ctx := testCtx(t)
			for _, cl := range calls {
				j, err := c.Submit(ctx, cl.ep, cl.args...)
				if err != nil {
					t.Fatalf("%s: %v", cl.ep, err)
				}
				var partial []string
				for ev := range j.Events() {
					if ev.Kind == gradio.EventOutput {
						partial = append(partial, str(t, ev.Data[0]))
					}
				}
				out, err := j.Wait(ctx)
				switch {
				case strings.HasPrefix(cl.want, "error:"):
					var ae *gradio.AppError
					if !errors.As(err, &ae) || !strings.Contains(ae.Message, strings.TrimPrefix(cl.want, "error:")) {
						t.Fatalf("%s: err %v", cl.ep, err)
					}
				case strings.HasPrefix(cl.want, "file:"):
					if err != nil {
						t.Fatalf("%s: %v", cl.ep, err)
					}
					fd, err := gradio.ParseFileData(out[0])
					if err != nil {
						t.Fatal(err)
					}
					var buf bytes.Buffer
					if err := c.Download(ctx, fd, &buf); err != nil {
						t.Fatal(err)
					}
					if buf.String() != strings.TrimPrefix(cl.want, "file:") {
						t.Fatalf("downloaded %q", buf.String())
					}
				default:
					if err != nil {
						t.Fatalf("%s: %v", cl.ep, err)
					}
					b, _ := json.Marshal(out)
					if string(b) != cl.want {
						t.Fatalf("%s = %s, want %s", cl.ep, b, cl.want)
					}
					if cl.partial != nil && strings.Join(partial, "|") != strings.Join(cl.partial, "|") {
						t.Fatalf("%s partial %q, want %q", cl.ep, partial, cl.partial)
					}
				}
			}
			c.Close()
			rs.check(t)
			t.Logf("requests: %v", rs.got)
		})
	}
}
