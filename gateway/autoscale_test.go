package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestAutoscaleAdmin: with autoscale.mode on over Spaces of the Hub
// emulation, GET /api/admin/autoscale shows each replica's stage, a hold
// parked through POST /api/admin/autoscale/replicas/{name} drains and
// pauses that Space (calls still served by the other), and the metrics
// show the stage and the actions.
func TestAutoscaleAdmin(t *testing.T) {
	hub, cfg := autoscaleSpaces(t)
	cfg.Autoscale.Interval = 10 * time.Millisecond
	gw, _ := openGateway(t, cfg)

	var st struct {
		Mode     string
		Replicas []struct{ Name, Stage, State string }
	}
	poll := func(cond func() bool) bool {
		for i := 0; i < 500; i++ {
			a := do(t, "GET", gw.URL+"/api/admin/autoscale", "")
			if a.status != 200 {
				t.Fatalf("GET autoscale: %d %s", a.status, a.body)
			}
			if err := json.Unmarshal([]byte(a.body), &st); err != nil {
				t.Fatal(err)
			}
			if cond() {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	if !poll(func() bool {
		return len(st.Replicas) == 2 && st.Replicas[0].Stage == "RUNNING" && st.Replicas[1].Stage == "RUNNING"
	}) {
		t.Fatalf("status %+v", st)
	}
	if st.Mode != "on" {
		t.Errorf("mode %q", st.Mode)
	}
	for _, bad := range []string{`{"hold":"sideways","duration":"1h"}`, `{"hold":"parked"}`, `{"hold":"parked","duration":"soon"}`, `not json`, `{"hold":"parked","duration":"1h","x":1}`} {
		if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/b", bad); a.status != 400 {
			t.Errorf("POST %s: %d %s", bad, a.status, a.body)
		}
	}
	if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/nope", `{"hold":"parked","duration":"1h"}`); a.status != 400 {
		t.Errorf("unknown replica: %d", a.status)
	}
	if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/b", `{"hold":"parked","duration":"1h"}`); a.status != 200 {
		t.Fatalf("hold: %d %s", a.status, a.body)
	}
	if !poll(func() bool { return st.Replicas[1].State == "parked" }) {
		t.Fatalf("not parked: %+v", st)
	}
	if got := hub.Stage("o/b"); got != gradiotest.StagePaused {
		t.Fatalf("Space o/b %s, want PAUSED", got)
	}
	for i := range 4 {
		a := do(t, "POST", gw.URL+"/v1/predict/upper", `{"data":["x"]}`, "X-User-Id", "user"+string(rune('a'+i))+"@example.com")
		if a.status != 200 {
			t.Fatalf("call %d with b parked: %d %s", i, a.status, a.body)
		}
	}
	m := do(t, "GET", gw.URL+"/metrics", "").body
	for _, want := range []string{`gradiopool_autoscale_replica_stage{replica="b",stage="PAUSED",state="parked"} 1`,
		`gradiopool_autoscale_actions_total{kind="park",result="ok"} 1`, `gradiopool_autoscale_awake_seconds_total{replica="a"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/b", `{"hold":"auto"}`); a.status != 200 {
		t.Fatalf("auto: %d %s", a.status, a.body)
	}
}

func TestAutoscaleOffAndValidation(t *testing.T) {
	srv := gradiotest.NewServer(nil)
	t.Cleanup(srv.Close)
	gw, _ := openGateway(t, gateway.Config{Pool: pool.Config{Replicas: []string{srv.URL}}})
	if a := do(t, "GET", gw.URL+"/api/admin/autoscale", ""); a.status != 200 || !strings.Contains(a.body, `"mode":"off"`) {
		t.Errorf("off: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/x", `{"hold":"auto"}`); a.status != 409 {
		t.Errorf("hold while off: %d %s", a.status, a.body)
	}
	for _, c := range []struct {
		name string
		set  func(*gateway.Config)
		want string
	}{
		{"bad mode", func(c *gateway.Config) { c.Autoscale.Mode = "maybe" }, "autoscale.mode"},
		{"no token", func(c *gateway.Config) { c.Autoscale.Mode = "on" }, "HF_TOKEN"},
		{"min_awake", func(c *gateway.Config) { c.Autoscale.MinAwake = -2 }, "min_awake"},
		{"budget", func(c *gateway.Config) { c.Autoscale.MaxActionsPerHour, c.Autoscale.MaxActionsPerDay = 5, 2 }, "max_actions"},
	} {
		cfg := gateway.Config{Pool: pool.Config{Replicas: []string{"o/a"}}}
		c.set(&cfg)
		cfg.Normalize()
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestAutoscaleCallWaitsForWake: with the only replica's Space paused
// (held parked), a call waits instead of failing; when the hold ends the
// policy wakes the Space (the waiting caller makes it urgent), and the
// call is served. Past autoscale.wake_timeout a call gets 503 with
// Retry-After.
func TestAutoscaleCallWaitsForWake(t *testing.T) {
	srv := gradiotest.NewServer(nil)
	hub := gradiotest.NewHub()
	t.Cleanup(func() {
		hub.Close()
		srv.Close()
	})
	hub.SetStartTimes(20*time.Millisecond, 20*time.Millisecond)
	hub.AddSpace("o/a", srv)
	cfg := gateway.Config{HubURL: hub.URL, Pool: pool.Config{Replicas: []string{"o/a"}, MinConnections: 1, MaxConnections: 2}}
	cfg.Secrets.HFToken = "hf_owner"
	cfg.Autoscale.Mode = "on"
	cfg.Autoscale.MinAwake = -1
	cfg.Autoscale.Interval = 10 * time.Millisecond
	cfg.Autoscale.WakeTimeout = 3 * time.Second // the wake takes ~50 ms here
	gw, _ := openGateway(t, cfg)
	if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/a", `{"hold":"parked","duration":"1h"}`); a.status != 200 {
		t.Fatalf("hold: %d %s", a.status, a.body)
	}
	for i := 0; i < 500 && hub.Stage("o/a") != gradiotest.StagePaused; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := hub.Stage("o/a"); got != gradiotest.StagePaused {
		t.Fatalf("stage %s", got)
	}
	// held parked: the call waits out wake_timeout and gets 503 + Retry-After
	a := do(t, "POST", gw.URL+"/v1/predict/upper", `{"data":["x"]}`)
	if a.status != 503 || a.header.Get("Retry-After") == "" || errorCode(t, a.body) != "replicas_parked" {
		t.Fatalf("past wake_timeout: %d %v %s", a.status, a.header, a.body)
	}
	done := make(chan answer, 1)
	go func() { done <- do(t, "POST", gw.URL+"/v1/predict/upper", `{"data":["x"]}`) }()
	time.Sleep(50 * time.Millisecond) // not an assertion: let the call start waiting
	if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/a", `{"hold":"auto"}`); a.status != 200 {
		t.Fatalf("auto: %d %s", a.status, a.body)
	}
	a = <-done
	if a.status != 200 || !strings.Contains(a.body, "X") {
		t.Fatalf("after the wake: %d %s", a.status, a.body)
	}
}

// TestAutoscaleClusterOneGatewayActs: two gateways of one cluster with
// autoscale.mode on: exactly one acts (holds the lease), a hold set at the
// other reaches it, and both pools take the paused Space out. The acting
// gateway then dies without giving its lease up: within the lease's TTL
// the other acts (a larger fencing token) and wakes the Space for a hold
// set at it; each Space was paused once and restarted once.
func TestAutoscaleClusterOneGatewayActs(t *testing.T) {
	hub, _ := autoscaleSpaces(t) // the gateways' config is a cluster's
	hub.SetStartTimes(20*time.Millisecond, 20*time.Millisecond)
	cfg := clusterConfig(t, "asc", []string{"o/a", "o/b"}, 4, 3*time.Second)
	cfg.Secrets.HFToken = "hf_owner"
	cfg.Autoscale.Mode = "on"
	cfg.Autoscale.Interval = 20 * time.Millisecond
	// Each gateway reaches the Hub through a proxy of its own that counts
	// its policy's calls.
	var hubCalls [2]atomic.Int64
	var urls []string
	var gws []*gateway.Gateway
	for i := range 2 {
		target, _ := url.Parse(hub.URL)
		rp := httputil.NewSingleHostReverseProxy(target)
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/runtime") || strings.HasSuffix(r.URL.Path, "/pause") || strings.HasSuffix(r.URL.Path, "/restart") {
				hubCalls[i].Add(1) // the policy's (the pool resolves Space ids too)
			}
			rp.ServeHTTP(w, r)
		}))
		t.Cleanup(proxy.Close)
		cfg := cfg
		cfg.HubURL = proxy.URL
		u, g := openGateways(t, cfg, 1)
		urls, gws = append(urls, u...), append(gws, g...)
	}

	type status struct {
		Cluster *struct {
			Acting       bool
			Leader       string
			FencingToken int64
		}
		Replicas []struct{ Name, Stage, State string }
	}
	get := func(u string) status {
		var st status
		a := do(t, "GET", u+"/api/admin/autoscale", "")
		if a.status != 200 {
			t.Fatalf("GET autoscale: %d %s", a.status, a.body)
		}
		if err := json.Unmarshal([]byte(a.body), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		for i := 0; i < 400; i++ {
			if cond() {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("never: %s", what)
	}
	acting := -1
	poll("one gateway acts", func() bool {
		s0, s1 := get(urls[0]), get(urls[1])
		if s0.Cluster == nil || s1.Cluster == nil {
			return false
		}
		if s0.Cluster.Acting && s1.Cluster.Acting {
			t.Fatal("both gateways act")
		}
		switch {
		case s0.Cluster.Acting && s1.Cluster.Leader == s0.Cluster.Leader:
			acting = 0
		case s1.Cluster.Acting && s0.Cluster.Leader == s1.Cluster.Leader:
			acting = 1
		}
		return acting >= 0
	})
	other := 1 - acting
	token := get(urls[acting]).Cluster.FencingToken
	if a := do(t, "POST", urls[other]+"/api/admin/autoscale/replicas/b", `{"hold":"parked","duration":"1h"}`); a.status != 200 {
		t.Fatalf("hold at the other gateway: %d %s", a.status, a.body)
	}
	poll("o/b paused", func() bool { return hub.Stage("o/b") == gradiotest.StagePaused })
	for i, g := range gws {
		poll(fmt.Sprintf("gateway %d's pool parks b", i), func() bool {
			return g.Pool().Stats(context.Background()).Pools["b"].State == pool.StateParked
		})
	}
	for i := range 4 { // calls through the gateway that does not act go to a
		a := do(t, "POST", urls[other]+"/v1/predict/upper", `{"data":["x"]}`, "X-User-Id", fmt.Sprintf("u%d@example.com", i))
		if a.status != 200 || !strings.Contains(a.body, `"replica":"a"`) {
			t.Fatalf("call %d with b parked: %d %s", i, a.status, a.body)
		}
	}

	if n := hubCalls[other].Load(); n != 0 {
		t.Fatalf("the gateway that does not act made %d Hub calls", n)
	}
	if hubCalls[acting].Load() == 0 {
		t.Fatal("the acting gateway made no Hub call")
	}

	gws[acting].KillAutoscale() // dies: no release, its lease runs out
	poll("the other gateway acts", func() bool {
		c := get(urls[other]).Cluster
		return c != nil && c.Acting && c.FencingToken > token
	})
	if a := do(t, "POST", urls[other]+"/api/admin/autoscale/replicas/b", `{"hold":"awake","duration":"1h"}`); a.status != 200 {
		t.Fatalf("hold awake: %d %s", a.status, a.body)
	}
	poll("o/b running again", func() bool { return hub.Stage("o/b") == gradiotest.StageRunning })
	poll("the acting gateway's pool takes b back", func() bool {
		return gws[other].Pool().Stats(context.Background()).Pools["b"].State != pool.StateParked
	})
	var stages []string
	for _, tr := range hub.Transitions("o/b") {
		stages = append(stages, tr.Stage)
	}
	if got := strings.Join(stages, " "); got != "PAUSED BUILDING APP_STARTING RUNNING" {
		t.Errorf("o/b went %s, want one pause and one restart", got)
	}
}

// wakeRig is one replica's Space held parked by the policy (min_awake
// -1), the Hub waking it in about 2 s.
func wakeRig(t *testing.T) (*httptest.Server, *gradiotest.Hub) {
	t.Helper()
	srv := gradiotest.NewServer(nil)
	hub := gradiotest.NewHub()
	t.Cleanup(func() {
		hub.Close()
		srv.Close()
	})
	hub.SetStartTimes(time.Second, time.Second)
	hub.AddSpace("o/a", srv)
	cfg := gateway.Config{HubURL: hub.URL, Pool: pool.Config{Replicas: []string{"o/a"}, MinConnections: 1, MaxConnections: 2}}
	cfg.Secrets.HFToken = "hf_owner"
	cfg.Autoscale.Mode = "on"
	cfg.Autoscale.MinAwake = -1
	cfg.Autoscale.Interval = 10 * time.Millisecond
	cfg.Autoscale.WakeTimeout = time.Minute
	gw, _ := openGateway(t, cfg)
	if a := do(t, "POST", gw.URL+"/v1/predict/upper", `{"data":["warm"]}`); a.status != 200 { // the front door learns the app
		t.Fatalf("warm-up: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/a", `{"hold":"parked","duration":"1h"}`); a.status != 200 {
		t.Fatalf("hold: %d %s", a.status, a.body)
	}
	for i := 0; i < 500 && hub.Stage("o/a") != gradiotest.StagePaused; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := hub.Stage("o/a"); got != gradiotest.StagePaused {
		t.Fatalf("stage %s", got)
	}
	return gw, hub
}

// readSSE sends each line of a stream to lines until it ends.
func readSSE(t *testing.T, resp *http.Response, lines chan<- string) {
	defer close(lines)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		lines <- sc.Text()
	}
}

// TestAutoscaleSubmitShowsWakeETA: a /v1/submit call that finds every
// replica parked starts its stream with waiting events that say it waits
// for a wake ("waking": true), then, once the policy woke the Space, the
// wake's ETA; then it runs.
func TestAutoscaleSubmitShowsWakeETA(t *testing.T) {
	gw, _ := wakeRig(t)
	resp, err := http.Post(gw.URL+"/v1/submit/upper", "application/json", strings.NewReader(`{"data":["x"]}`))
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go readSSE(t, resp, lines)
	var waiting []map[string]any
	event := ""
	first := true
	for line := range lines {
		if first { // the stream started while the call waits: end the hold
			first = false
			if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/a", `{"hold":"auto"}`); a.status != 200 {
				t.Fatalf("auto: %d %s", a.status, a.body)
			}
		}
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "waiting":
			var m map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m); err != nil {
				t.Fatal(err)
			}
			waiting = append(waiting, m)
		case strings.HasPrefix(line, "data: ") && event == "error":
			t.Fatalf("error: %s", line)
		}
	}
	if event != "complete" {
		t.Fatalf("stream ended with %q", event)
	}
	withETA := 0
	for _, m := range waiting {
		if m["waking"] != true {
			t.Errorf("waiting event without waking: %v", m)
		}
		if eta, ok := m["eta"].(float64); ok {
			if eta <= 0 || eta > 120 { // the policy's estimate until a wake is measured: 2 min
				t.Errorf("wake eta %v", eta)
			}
			withETA++
		}
	}
	if len(waiting) == 0 || withETA == 0 {
		t.Fatalf("waiting events %v: want some with the wake's eta", waiting)
	}
}

// TestAutoscaleFrontDoorShowsWakeETA: a Gradio client's join that finds
// every replica parked is answered at once (its event id) and its stream
// carries estimation messages whose rank_eta is the wake's ETA, then the
// result.
func TestAutoscaleFrontDoorShowsWakeETA(t *testing.T) {
	gw, _ := wakeRig(t)
	const hash = "wakeeta01"
	done := make(chan string, 1)
	go func() { done <- joinAtErr(gw.URL, hash, `"data":["a"],"fn_index":0`) }()
	var joined string
	select {
	case joined = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the join waits for the wake instead of being answered")
	}
	if !strings.Contains(joined, "event_id") {
		t.Fatalf("join: %s", joined)
	}
	if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/a", `{"hold":"auto"}`); a.status != 200 {
		t.Fatalf("auto: %d %s", a.status, a.body)
	}
	resp, err := http.Get(gw.URL + "/gradio_api/queue/data?session_hash=" + hash)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go readSSE(t, resp, lines)
	withETA, completed := 0, false
	for line := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "estimation":
			if eta, ok := m["rank_eta"].(float64); ok && eta > 0 && eta <= 120 {
				withETA++
			}
		case "process_completed":
			completed = m["success"] == true
		}
	}
	if withETA == 0 || !completed {
		t.Fatalf("estimations with the wake's eta: %d, completed: %v", withETA, completed)
	}
}

// joinAtErr posts a join and returns the answer's body (with its status).
func joinAtErr(base, hash, body string) string {
	resp, err := http.Post(base+"/gradio_api/queue/join", "application/json",
		strings.NewReader(`{`+body+`,"session_hash":"`+hash+`","event_data":null,"trigger_id":null}`))
	if err != nil {
		return err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}

// TestAutoscaleSleepLever: with autoscale.park_lever sleep, a replica held
// parked gets a short sleep time (never a pause) and its Space stops by
// itself; held awake again, the gateway wakes it with a visit through its
// pool (no build) and serves calls there again.
func TestAutoscaleSleepLever(t *testing.T) {
	hub, cfg := autoscaleSpaces(t)
	hub.SetStartTimes(20*time.Millisecond, 20*time.Millisecond)
	cfg.Autoscale.ParkLever = "sleep"
	cfg.Autoscale.SleepTime = time.Second
	cfg.Autoscale.Interval = 10 * time.Millisecond
	gw, _ := openGateway(t, cfg)
	if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/b", `{"hold":"parked","duration":"1h"}`); a.status != 200 {
		t.Fatalf("hold: %d %s", a.status, a.body)
	}
	for i := 0; i < 500 && hub.Stage("o/b") != gradiotest.StageStopped; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := hub.Stage("o/b"); got != gradiotest.StageStopped {
		t.Fatalf("o/b %s, want STOPPED by its sleep time", got)
	}
	if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/b", `{"hold":"awake","duration":"1h"}`); a.status != 200 {
		t.Fatalf("hold awake: %d %s", a.status, a.body)
	}
	for i := 0; i < 500 && hub.Stage("o/b") != gradiotest.StageRunning; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	var stages []string
	for _, tr := range hub.Transitions("o/b") {
		stages = append(stages, tr.Stage)
	}
	if got := strings.Join(stages, " "); got != "STOPPED APP_STARTING RUNNING" {
		t.Fatalf("o/b went %q, want STOPPED APP_STARTING RUNNING (no pause, no build)", got)
	}
	served := false
	for i := 0; i < 200 && !served; i++ {
		a := do(t, "POST", gw.URL+"/v1/predict/upper", `{"data":["x"]}`, "X-User-Id", fmt.Sprintf("s%d@example.com", i))
		if a.status != 200 {
			t.Fatalf("call %d: %d %s", i, a.status, a.body)
		}
		served = strings.Contains(a.body, `"replica":"b"`)
		if !served {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !served {
		t.Fatal("b never served again after its wake")
	}
}

// TestAutoscaleWakeThatFailsServesFromAnother: every Space paused, a call
// waits; the Space woken for it goes RUNTIME_ERROR instead of running.
// The policy hands that replica back to the pool (a failure its health
// checks judge) and wakes the other, and the call, which no awake replica
// can take while a paused one could, keeps waiting and is served there.
func TestAutoscaleWakeThatFailsServesFromAnother(t *testing.T) {
	hub, cfg := autoscaleSpaces(t)
	hub.SetStartTimes(20*time.Millisecond, 20*time.Millisecond)
	cfg.Autoscale.MinAwake = -1
	cfg.Autoscale.Interval = 10 * time.Millisecond
	cfg.Autoscale.WakeTimeout = 20 * time.Second
	gw, _ := openGateway(t, cfg)
	for _, n := range []string{"a", "b"} {
		if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/"+n, `{"hold":"parked","duration":"1h"}`); a.status != 200 {
			t.Fatalf("hold %s: %d %s", n, a.status, a.body)
		}
	}
	waitStage := func(id string, want ...string) string {
		t.Helper()
		for i := 0; i < 1000; i++ {
			got := hub.Stage(id)
			for _, w := range want {
				if got == w {
					return got
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("%s: %s, want %v", id, hub.Stage(id), want)
		return ""
	}
	waitStage("o/a", gradiotest.StagePaused)
	waitStage("o/b", gradiotest.StagePaused)
	hub.SetStartTimes(2*time.Second, 20*time.Millisecond) // a build long enough to fail during it

	done := make(chan answer, 1)
	go func() { done <- do(t, "POST", gw.URL+"/v1/predict/upper", `{"data":["x"]}`) }()
	for _, n := range []string{"a", "b"} {
		if a := do(t, "POST", gw.URL+"/api/admin/autoscale/replicas/"+n, `{"hold":"auto"}`); a.status != 200 {
			t.Fatalf("auto %s: %d %s", n, a.status, a.body)
		}
	}
	waitStage("o/a", gradiotest.StageBuilding) // woken first, for the waiting call
	if got := hub.Stage("o/b"); got != gradiotest.StagePaused {
		t.Fatalf("o/b %s: one waiting call needs one replica", got)
	}
	hub.SetStage("o/a", "RUNTIME_ERROR")
	a := <-done
	if a.status != 200 || !strings.Contains(a.body, "X") {
		t.Fatalf("the waiting call: %d %s", a.status, a.body)
	}
	if got := hub.Stage("o/b"); got != gradiotest.StageRunning {
		t.Errorf("o/b %s after serving the call", got)
	}
	st := do(t, "GET", gw.URL+"/api/admin/autoscale", "").body
	if !strings.Contains(st, "while waking") {
		t.Errorf("no failed wake in the autoscale log: %s", st)
	}
}

// autoscaleSpaces serves two simulated apps as the Spaces o/a and o/b of
// a Hub emulation (owner token hf_owner), and returns a gateway config
// over them with autoscale on.
func autoscaleSpaces(t *testing.T) (*gradiotest.Hub, gateway.Config) {
	t.Helper()
	srvs := []*gradiotest.Server{gradiotest.NewServer(nil), gradiotest.NewServer(nil)}
	hub := gradiotest.NewHub()
	t.Cleanup(func() {
		hub.Close()
		for _, s := range srvs {
			s.Close()
		}
	})
	hub.SetOwnerToken("hf_owner")
	hub.AddSpace("o/a", srvs[0])
	hub.AddSpace("o/b", srvs[1])
	cfg := gateway.Config{HubURL: hub.URL, Pool: pool.Config{Replicas: []string{"o/a", "o/b"}, MinConnections: 1, MaxConnections: 2}}
	cfg.Secrets.HFToken = "hf_owner"
	cfg.Autoscale.Mode = "on"
	return hub, cfg
}
