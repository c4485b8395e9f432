package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestServeSIGHUP: SIGHUP (systemctl reload) re-reads the configuration
// file: a replica added serves, pool.max_connections changes, a key that
// cannot change live (drain_timeout) is refused with a log line naming it,
// and the call in flight during the reload finishes. POST
// /api/admin/reload does the same and answers what it applied and refused;
// a configuration that does not load changes nothing.
func TestServeSIGHUP(t *testing.T) {
	sim1 := gradiotest.NewServer(gradiotest.DefaultApp())
	defer sim1.Close()
	sim2 := gradiotest.NewServer(gradiotest.DefaultApp())
	defer sim2.Close()
	name1, name2 := hostOf(t, sim1.URL), hostOf(t, sim2.URL)
	file := filepath.Join(t.TempDir(), "gradiopool.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("replicas: [" + sim1.URL + "]\npool:\n  max_connections: 1\ndrain_timeout: 30s\n")
	g := startServe(t, []string{"GRADIOPOOL_LOG_FORMAT=json"}, "--config", file, "--listen", "127.0.0.1:0")

	type result struct {
		status int
		err    error
	}
	slow := make(chan result, 1)
	go func() {
		resp, err := http.Post(g.url+"/v1/predict/slow", "application/json", strings.NewReader(`{"data":[2]}`))
		if err != nil {
			slow <- result{err: err}
			return
		}
		resp.Body.Close()
		slow <- result{status: resp.StatusCode}
	}()
	// Bounded wait until the slow call is running (the access log of the
	// call comes at its end, so look at the replica instead).
	for i := 0; i < 500 && sim1.Snapshot().Running == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if sim1.Snapshot().Running == 0 {
		t.Fatalf("the slow call never ran:\n%s", g.stderr.String())
	}
	write("replicas: [" + sim1.URL + ", " + sim2.URL + "]\npool:\n  max_connections: 2\ndrain_timeout: 45s\n")
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, g, `"msg":"configuration reloaded"`)
	if r := <-slow; r.err != nil || r.status != 200 {
		t.Fatalf("the call in flight during SIGHUP: %d %v\n%s", r.status, r.err, g.stderr.String())
	}
	select {
	case err := <-g.waited:
		t.Fatalf("serve exited after SIGHUP: %v\n%s", err, g.stderr.String())
	default:
	}
	if l := logLine(g, `"msg":"configuration reloaded"`); !strings.Contains(l, `"replicas"`) || !strings.Contains(l, `"pool.max_connections"`) {
		t.Errorf("reload line = %s, want replicas and pool.max_connections applied", l)
	}
	refused := logLine(g, "reload: these settings cannot change")
	if !strings.Contains(refused, `"drain_timeout"`) || strings.Contains(refused, `"replicas"`) {
		t.Errorf("refusal line = %s, want drain_timeout named and replicas not", refused)
	}
	var st struct {
		Replicas []string `json:"replicas"`
		Pools    map[string]struct {
			State string `json:"state"`
		} `json:"pools"`
	}
	getJSON(t, g.url+"/api/admin/pool-stats", &st)
	if !slices.Equal(st.Replicas, []string{name1, name2}) {
		t.Errorf("replicas after SIGHUP = %v, want [%s %s]", st.Replicas, name1, name2)
	}
	for i := range 4 {
		resp, err := http.Post(g.url+"/v1/predict/upper", "application/json", strings.NewReader(`{"data":["x"]}`))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("call %d after SIGHUP: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
	if sim2.Executions("upper") == 0 {
		t.Error("the replica added by SIGHUP took none of 4 anonymous calls")
	}

	// The admin route: sim1 removed.
	write("replicas: [" + sim2.URL + "]\npool:\n  max_connections: 2\ndrain_timeout: 45s\n")
	var out struct {
		Applied, Refused, Replicas []string
	}
	postJSON(t, g.url+"/api/admin/reload", 200, &out)
	if !slices.Equal(out.Applied, []string{"replicas"}) || !slices.Contains(out.Refused, "drain_timeout") || !slices.Equal(out.Replicas, []string{name2}) {
		t.Errorf("POST /api/admin/reload = %+v, want replicas applied, drain_timeout refused, [%s] serving", out, name2)
	}
	before := sim1.Executions("upper")
	resp, err := http.Post(g.url+"/v1/predict/upper", "application/json", strings.NewReader(`{"data":["y"]}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("call after the admin reload: %v %v", resp, err)
	}
	resp.Body.Close()
	if sim1.Executions("upper") != before {
		t.Error("the removed replica took a new call")
	}

	// A file that does not parse: refused, nothing changed.
	write("replicas: [\n")
	var bad struct {
		Error struct{ Code string }
	}
	postJSON(t, g.url+"/api/admin/reload", 422, &bad)
	if bad.Error.Code != "reload_failed" {
		t.Errorf("reload of a broken file: code %q, want reload_failed", bad.Error.Code)
	}
	getJSON(t, g.url+"/api/admin/pool-stats", &st)
	if !slices.Equal(st.Replicas, []string{name2}) {
		t.Errorf("replicas after a failed reload = %v, want [%s]", st.Replicas, name2)
	}
}

func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}

// waitLog waits (bounded) for a log line containing s.
func waitLog(t *testing.T, g *e2eGateway, s string) {
	t.Helper()
	for i := 0; i < 1000 && !strings.Contains(g.stderr.String(), s); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(g.stderr.String(), s) {
		t.Fatalf("no log line with %s:\n%s", s, g.stderr.String())
	}
}

func logLine(g *e2eGateway, s string) string {
	for _, l := range strings.Split(g.stderr.String(), "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func postJSON(t *testing.T, u string, status int, v any) {
	t.Helper()
	resp, err := http.Post(u, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		t.Errorf("POST %s: %d, want %d", u, resp.StatusCode, status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestServeSIGHUPRotatesKeys: with GRADIOPOOL_API_KEYS_FILE and
// GRADIOPOOL_ADMIN_TOKEN_FILE, a SIGHUP after the files changed rotates the
// keys and the token in the running process: the old ones are refused, the
// new ones pass, no restart; the values never reach the log.
func TestServeSIGHUPRotatesKeys(t *testing.T) {
	sim := gradiotest.NewServer(gradiotest.DefaultApp())
	defer sim.Close()
	dir := t.TempDir()
	keys, token := filepath.Join(dir, "keys"), filepath.Join(dir, "admin")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(keys, "key-0ld\n")
	write(token, "t0ken-0ld\n")
	g := startServe(t, []string{"GRADIOPOOL_LOG_FORMAT=json", "GRADIOPOOL_API_KEYS_FILE=" + keys, "GRADIOPOOL_ADMIN_TOKEN_FILE=" + token},
		"--replicas", sim.URL, "--listen", "127.0.0.1:0")
	status := func(method, path, bearer string) int {
		t.Helper()
		req, _ := http.NewRequest(method, g.url+path, strings.NewReader(`{"data":["x"]}`))
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status("POST", "/v1/predict/upper", "key-0ld") != 200 || status("GET", "/api/admin/pool-stats", "t0ken-0ld") != 200 {
		t.Fatalf("the start's key and token do not work:\n%s", g.stderr.String())
	}
	write(keys, "# rotated\nkey-n3w\n")
	write(token, "t0ken-n3w\n")
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, g, `"msg":"configuration reloaded"`)
	for _, c := range []struct {
		method, path, bearer string
		want                 int
	}{
		{"POST", "/v1/predict/upper", "key-0ld", 403},
		{"POST", "/v1/predict/upper", "key-n3w", 200},
		{"GET", "/api/admin/pool-stats", "t0ken-0ld", 403},
		{"GET", "/api/admin/pool-stats", "t0ken-n3w", 200},
	} {
		if got := status(c.method, c.path, c.bearer); got != c.want {
			t.Errorf("%s %s with %s after SIGHUP: %d, want %d", c.method, c.path, c.bearer, got, c.want)
		}
	}
	if l := logLine(g, `"msg":"configuration reloaded"`); !strings.Contains(l, "GRADIOPOOL_API_KEYS") || !strings.Contains(l, "GRADIOPOOL_ADMIN_TOKEN") {
		t.Errorf("reload line = %s, want both secrets applied", l)
	}
	for _, s := range []string{"key-0ld", "key-n3w", "t0ken"} {
		if strings.Contains(g.stderr.String(), s) {
			t.Errorf("a secret (%s) reached the log", s)
		}
	}
}
