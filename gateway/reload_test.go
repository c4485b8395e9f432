package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
	"github.com/gradiopool/gradiopool/pool"
)

// reloadGateway serves gateway.Open of cfg on a loopback listener; set
// changes what its configuration loader returns next.
func reloadGateway(t *testing.T, cfg gateway.Config) (g *gateway.Gateway, url string, logs *logbuf.Buffer, set func(gateway.Config, error)) {
	t.Helper()
	logs = &logbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	g, err := gateway.Open(context.Background(), cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	next, nextErr := cfg, error(nil)
	g.SetConfigLoader(func() (gateway.Config, error) {
		mu.Lock()
		defer mu.Unlock()
		return next, nextErr
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Serve(ctx, ln); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = g.Close(context.Background())
	})
	return g, "http://" + ln.Addr().String(), logs, func(c gateway.Config, err error) {
		mu.Lock()
		defer mu.Unlock()
		next, nextErr = c, err
	}
}

// TestReloadFrontDoorCallAcrossRemoval: a front-door call joined on
// replica A goes on when a reload removes A, even though the caller opens
// its queue/data stream only after the reload (as Gradio clients do after
// the join); new calls go to B, and the admin route answers what changed.
func TestReloadFrontDoorCallAcrossRemoval(t *testing.T) {
	release := make(chan struct{})
	simA := gradiotest.NewServer(fdtest.HoldApp(release))
	defer simA.Close()
	simB := gradiotest.NewServer(fdtest.HoldApp(release))
	defer simB.Close()
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{simA.URL}, MinConnections: 1, MaxConnections: 4}}
	_, url, logs, set := reloadGateway(t, cfg)
	fn := fdtest.FnIndex(t, url, "hold")
	a := do(t, "POST", url+"/gradio_api/queue/join", fmt.Sprintf(`{"data":["x"],"fn_index":%d,"session_hash":"reload1","event_data":null,"trigger_id":null}`, fn))
	if a.status != 200 {
		t.Fatalf("join: %d %s", a.status, a.body)
	}
	fdtest.WaitFor(t, "the call to run on A", func() bool { return simA.Snapshot().Running == 1 })

	next := cfg
	next.Pool.Replicas = []string{simB.URL}
	set(next, nil)
	r := do(t, "POST", url+"/api/admin/reload", "")
	var out gateway.Reloaded
	if r.status != 200 || json.Unmarshal([]byte(r.body), &out) != nil {
		t.Fatalf("reload: %d %s", r.status, r.body)
	}
	nameB := strings.TrimPrefix(simB.URL, "http://")
	if !slices.Equal(out.Applied, []string{"replicas"}) || len(out.Refused) != 0 || !slices.Equal(out.Replicas, []string{nameB}) {
		t.Errorf("reload answer = %+v, want replicas applied, nothing refused, [%s]", out, nameB)
	}

	data, err := http.Get(url + "/gradio_api/queue/data?session_hash=reload1")
	if err != nil {
		t.Fatal(err)
	}
	defer data.Body.Close()
	close(release)
	var completed string
	sc := bufio.NewScanner(data.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"process_completed"`) {
			completed = sc.Text()
			break
		}
	}
	if !strings.Contains(completed, `"success":true`) {
		t.Fatalf("the front-door call across the reload: %q\n%s", completed, logs.String())
	}
	if n := simA.Executions("hold"); n != 1 {
		t.Errorf("hold ran %d times on A, want 1", n)
	}
	// A new call goes to B.
	if p := do(t, "POST", url+"/v1/predict/hold", `{"data":["y"]}`); p.status != 200 || simB.Executions("hold") != 1 {
		t.Errorf("call after the reload: %d %s, B ran hold %d times", p.status, p.body, simB.Executions("hold"))
	}
	// A new front-door caller is served by B.
	call := openFront(t, url, "reload2", fn)
	<-call.done
	if m := call.completed(); m == nil || m["success"] != true || simB.Executions("hold") != 2 {
		t.Errorf("front-door call after the reload: %s (B ran hold %d times)", call.text(), simB.Executions("hold"))
	}
	if !strings.Contains(logs.String(), `"msg":"replica removed: draining"`) {
		t.Errorf("no drain log line:\n%s", logs.String())
	}
}

// TestReloadRefusesFixedKeys: keys that cannot change live (listen,
// secrets) are refused by name, in one log line, with no secret value in
// it; a loader error changes nothing; sizes change in place.
func TestReloadRefusesFixedKeys(t *testing.T) {
	sim := gradiotest.NewServer(gradiotest.DefaultApp())
	defer sim.Close()
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{sim.URL}, MinConnections: 1, MaxConnections: 2}, Listen: "127.0.0.1:1"}
	g, _, logs, set := reloadGateway(t, cfg)
	next := cfg
	next.Listen = "127.0.0.1:2"
	next.Secrets.HFToken = "s3cret-hf-token"
	next.Pool.MaxConnections = 3
	next.Pool.QueueTimeout = time.Minute
	set(next, nil)
	out, err := g.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Applied, []string{"pool.max_connections", "pool.queue_timeout"}) ||
		!slices.Equal(out.Refused, []string{"listen", "HF_TOKEN"}) {
		t.Errorf("Reload = %+v", out)
	}
	if n := strings.Count(logs.String(), "cannot change while the gateway runs"); n != 1 {
		t.Errorf("%d refusal lines, want 1:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Error("a secret reached the log")
	}
	if m := g.Pool().Stats(context.Background()).Pools; len(m) != 1 {
		t.Fatalf("pools = %v", m)
	}
	// The refused keys stay refused (they still differ from what runs);
	// the applied ones are no longer reported.
	out, err = g.Reload()
	if err != nil || len(out.Applied) != 0 || len(out.Refused) != 2 {
		t.Errorf("second Reload = %+v, %v", out, err)
	}
	set(gateway.Config{}, errors.New("config: broken file"))
	if _, err := g.Reload(); err == nil || !strings.Contains(err.Error(), "broken file") {
		t.Errorf("Reload with a loader error: %v", err)
	}
	if got := g.Pool().Replicas(); len(got) != 1 {
		t.Errorf("replicas after a failed reload: %v", got)
	}
}

// TestReloadWithoutLoader: a gateway made without a configuration source
// answers the admin route 501 reload_unavailable.
func TestReloadWithoutLoader(t *testing.T) {
	sim := gradiotest.NewServer(gradiotest.DefaultApp())
	defer sim.Close()
	g, err := gateway.Open(context.Background(), gateway.Config{Pool: pool.Config{Replicas: []string{sim.URL}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	w := httptest.NewRecorder()
	g.ServeHTTP(w, httptest.NewRequest("POST", "/api/admin/reload", nil))
	if w.Code != 501 || !strings.Contains(w.Body.String(), "reload_unavailable") {
		t.Errorf("reload without a loader: %d %s", w.Code, w.Body.String())
	}
}

// TestReloadMovesFrontDoorSessions: front-door sessions bound to a
// replica a reload removes move to another replica at their next call
// (their gr.State starts empty there, counted in state_lost), never an
// error; before, every such call failed ("pool: unknown replica").
func TestReloadMovesFrontDoorSessions(t *testing.T) {
	simA := gradiotest.NewServer(nil)
	defer simA.Close()
	simB := gradiotest.NewServer(nil)
	defer simB.Close()
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{simA.URL}, MinConnections: 1, MaxConnections: 4}}
	g, url, logs, set := reloadGateway(t, cfg)
	counter := fdtest.FnIndex(t, url, "counter")
	for i := range 3 {
		if got := fdtest.Call(t, url, fmt.Sprintf("moved%d", i), counter, "a", nil); got != "1 items: a" {
			t.Fatalf("session %d on A: %q", i, got)
		}
	}
	next := cfg
	next.Pool.Replicas = []string{simB.URL}
	set(next, nil)
	if r := do(t, "POST", url+"/api/admin/reload", ""); r.status != 200 {
		t.Fatalf("reload: %d %s", r.status, r.body)
	}
	for i := range 3 {
		got, err := fdtest.CallErr(url, fmt.Sprintf("moved%d", i), counter, "b", nil)
		if err != nil || got != "1 items: b" {
			t.Fatalf("session %d after A was removed: %q %v, want a fresh state on B\n%s", i, got, err, logs.String())
		}
	}
	if st := g.FrontDoor().Stats(); st.Moved != 3 || st.StateLost != 3 {
		t.Errorf("front door stats %+v: want 3 sessions moved, 3 with state lost", st)
	}
}

// TestReloadFrontDoorLimits: the front door's bounds change by a reload,
// without a restart: a session cap of 2 per client refuses a third
// session, then a reload raising it to 3 lets it in; the key is reported
// applied, not refused.
func TestReloadFrontDoorLimits(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	defer sim.Close()
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{sim.URL}, MinConnections: 1, MaxConnections: 4}}
	cfg.FrontDoor.MaxSessionsPerClient = 2
	_, url, _, set := reloadGateway(t, cfg)
	upper := fdtest.FnIndex(t, url, "upper")
	for i := range 2 {
		if got := fdtest.Call(t, url, fmt.Sprintf("limit%d", i), upper, "x"); got != "X" {
			t.Fatalf("session %d: %q", i, got)
		}
	}
	if _, err := fdtest.Join(url, "limit2", upper, "x"); err == nil || !strings.Contains(err.Error(), "429") {
		t.Fatalf("a third session under a cap of 2: %v, want 429", err)
	}
	next := cfg
	next.FrontDoor.MaxSessionsPerClient = 3
	set(next, nil)
	r := do(t, "POST", url+"/api/admin/reload", "")
	var out gateway.Reloaded
	if r.status != 200 || json.Unmarshal([]byte(r.body), &out) != nil || !slices.Contains(out.Applied, "frontdoor.max_sessions_per_client") || len(out.Refused) != 0 {
		t.Fatalf("reload: %d %s", r.status, r.body)
	}
	if got := fdtest.Call(t, url, "limit2", upper, "y"); got != "Y" {
		t.Fatalf("the third session after the reload: %q", got)
	}
}
