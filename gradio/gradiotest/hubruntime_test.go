package gradiotest_test

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// fakeClock is an injected clock moved by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const owner = "hf_owner"

// runtimeHub is a Hub on a fake clock with one l4x1 Space served by srv.
func runtimeHub(t *testing.T) (*gradiotest.Hub, *gradiotest.Server, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	srv := newServer(t, nil)
	hub := gradiotest.NewHub()
	t.Cleanup(hub.Close)
	hub.SetClock(clk.Now)
	hub.SetStartTimes(60*time.Second, 90*time.Second)
	hub.SetOwnerToken(owner)
	hub.AddSpace("o/gpu", srv)
	hub.SetHardware("o/gpu", "l4x1")
	return hub, srv, clk
}

func hubCall(t *testing.T, hub *gradiotest.Hub, method, what, token string, body any) (int, http.Header, map[string]any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		rd = bytes.NewReader(mustJSON(t, body))
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, hub.URL+"/api/spaces/o/gpu/"+what, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, resp.Header, m
}

func appStatus(t *testing.T, s *gradiotest.Server) int {
	t.Helper()
	st, _, _ := do(t, "GET", api(s)+"/info", "", nil)
	return st
}

func stageOf(t *testing.T, hub *gradiotest.Hub) string {
	t.Helper()
	st, _, m := hubCall(t, hub, "GET", "runtime", "", nil)
	if st != 200 {
		t.Fatalf("runtime: %d %v", st, m)
	}
	return m["stage"].(string)
}

func TestHubPauseRestartStages(t *testing.T) {
	hub, srv, clk := runtimeHub(t)
	st, _, m := hubCall(t, hub, "POST", "pause", owner, nil)
	if st != 200 || m["stage"] != gradiotest.StagePaused {
		t.Fatalf("pause: %d %v", st, m)
	}
	hw := m["hardware"].(map[string]any)
	if hw["current"] != "l4x1" || hw["requested"] != "l4x1" {
		t.Errorf("hardware %v", hw)
	}
	if got := appStatus(t, srv); got != 503 {
		t.Fatalf("paused app answered %d, want 503", got)
	}
	clk.Add(24 * time.Hour)
	if got := stageOf(t, hub); got != gradiotest.StagePaused {
		t.Fatalf("a paused Space woke by itself: %s", got)
	}
	if got := appStatus(t, srv); got != 503 {
		t.Fatalf("a visit woke a paused Space: %d", got)
	}
	if st, _, m := hubCall(t, hub, "POST", "restart", owner, nil); st != 200 || m["stage"] != gradiotest.StageBuilding {
		t.Fatalf("restart: %d %v", st, m)
	}
	clk.Add(59 * time.Second)
	if got := stageOf(t, hub); got != gradiotest.StageBuilding {
		t.Fatalf("at 59s: %s", got)
	}
	clk.Add(time.Second)
	if got := stageOf(t, hub); got != gradiotest.StageAppStarting {
		t.Fatalf("at 60s: %s", got)
	}
	if got := appStatus(t, srv); got != 503 {
		t.Fatalf("starting app answered %d", got)
	}
	clk.Add(90 * time.Second)
	if got := stageOf(t, hub); got != gradiotest.StageRunning {
		t.Fatalf("at 150s: %s", got)
	}
	if got := appStatus(t, srv); got != 200 {
		t.Fatalf("running app answered %d", got)
	}
	var stages []string
	for _, tr := range hub.Transitions("o/gpu") {
		stages = append(stages, tr.Stage)
	}
	if want := "PAUSED BUILDING APP_STARTING RUNNING"; strings.Join(stages, " ") != want {
		t.Errorf("transitions %v, want %s", stages, want)
	}
}

func TestHubSleepTimeStopsAndVisitWakes(t *testing.T) {
	hub, srv, clk := runtimeHub(t)
	if st, _, m := hubCall(t, hub, "POST", "sleeptime", owner, map[string]any{"seconds": 900}); st != 200 || m["gcTimeout"] != 900.0 {
		t.Fatalf("sleeptime: %d %v", st, m)
	}
	clk.Add(899 * time.Second)
	if got := appStatus(t, srv); got != 200 { // a visit: the idle timer starts again
		t.Fatalf("app %d", got)
	}
	clk.Add(899 * time.Second)
	if got := stageOf(t, hub); got != gradiotest.StageRunning {
		t.Fatalf("stopped though visited 899s ago: %s", got)
	}
	clk.Add(time.Second)
	if got := stageOf(t, hub); got != gradiotest.StageStopped {
		t.Fatalf("idle 900s: %s %v %v", got, clk.Now(), hub.Transitions("o/gpu"))
	}
	// look-ups do not wake it (the default)
	clk.Add(time.Hour)
	if got := stageOf(t, hub); got != gradiotest.StageStopped {
		t.Fatalf("a look-up woke it: %s", got)
	}
	if got := appStatus(t, srv); got != 503 {
		t.Fatalf("stopped app answered %d", got)
	}
	if got := stageOf(t, hub); got != gradiotest.StageAppStarting {
		t.Fatalf("a visit did not wake it: %s", got)
	}
	clk.Add(90 * time.Second)
	if got := appStatus(t, srv); got != 200 {
		t.Fatalf("woken app answered %d", got)
	}
}

func TestHubLookupWakesSwitch(t *testing.T) {
	hub, _, clk := runtimeHub(t)
	hub.SetLookupWakes(true)
	hub.SetSleepTime("o/gpu", 60)
	clk.Add(61 * time.Second)
	if got := stageOf(t, hub); got != gradiotest.StageAppStarting {
		t.Fatalf("with look-ups waking: %s", got)
	}
}

func TestHubRuntimeAuth(t *testing.T) {
	hub, _, _ := runtimeHub(t)
	for _, what := range []string{"pause", "restart", "sleeptime", "hardware"} {
		if st, _, m := hubCall(t, hub, "POST", what, "", map[string]any{"seconds": 60}); st != 401 {
			t.Errorf("%s without a token: %d %v", what, st, m)
		}
		if st, _, m := hubCall(t, hub, "POST", what, "hf_visitor", map[string]any{"seconds": 60}); st != 403 {
			t.Errorf("%s as a non-owner: %d %v", what, st, m)
		}
	}
	if got := stageOf(t, hub); got != gradiotest.StageRunning {
		t.Errorf("refused calls changed the stage: %s", got)
	}
}

func TestHubRuntimeBadInput(t *testing.T) {
	hub, _, _ := runtimeHub(t)
	for _, c := range []struct {
		what string
		body any
	}{
		{"sleeptime", map[string]any{}},
		{"sleeptime", map[string]any{"seconds": -5}},
		{"sleeptime", "not an object"},
		{"hardware", map[string]any{"flavor": "quantum-1"}},
		{"dance", nil},
	} {
		if st, _, m := hubCall(t, hub, "POST", c.what, owner, c.body); st != 400 && st != 404 {
			t.Errorf("%s %v: %d %v", c.what, c.body, st, m)
		}
	}
	if got := stageOf(t, hub); got != gradiotest.StageRunning {
		t.Errorf("bad calls changed the stage: %s", got)
	}
}

func TestHubRateLimit(t *testing.T) {
	hub, _, clk := runtimeHub(t)
	hub.SetRateLimit(3)
	for i := range 3 {
		st, hdr, _ := hubCall(t, hub, "GET", "runtime", owner, nil)
		if st != 200 || !strings.Contains(hdr.Get("RateLimit"), "r=") || hdr.Get("RateLimit-Policy") == "" {
			t.Fatalf("call %d: %d %v", i, st, hdr)
		}
	}
	st, hdr, _ := hubCall(t, hub, "POST", "pause", owner, nil)
	if st != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(hdr.Get("RateLimit"), "r=0") {
		t.Fatalf("past the budget: %d %v", st, hdr)
	}
	if got := hub.Stage("o/gpu"); got != gradiotest.StageRunning {
		t.Fatalf("a refused pause paused: %s", got)
	}
	// another token has its own budget; a new window resets
	if st, _, _ := hubCall(t, hub, "GET", "runtime", "hf_other", nil); st != 200 {
		t.Errorf("other token: %d", st)
	}
	clk.Add(gradiotest.HubRateWindow)
	if st, _, _ := hubCall(t, hub, "POST", "pause", owner, nil); st != 200 {
		t.Errorf("next window: %d", st)
	}
}

func TestHubBilling(t *testing.T) {
	hub, _, clk := runtimeHub(t)
	clk.Add(time.Hour) // running: billed
	hubCall(t, hub, "POST", "pause", owner, nil)
	clk.Add(5 * time.Hour) // paused: not billed
	hubCall(t, hub, "POST", "restart", owner, nil)
	clk.Add(60 * time.Second) // building: not billed
	clk.Add(90 * time.Second) // starting: billed
	clk.Add(30 * time.Minute) // running
	b := hub.Bill("o/gpu")
	wantS := 3600 + 90 + 1800.0
	if math.Abs(b.Seconds-wantS) > 1e-6 || math.Abs(b.Dollars-wantS/3600*0.80) > 1e-9 {
		t.Fatalf("bill %+v, want %v s at $0.80/h", b, wantS)
	}
	hub.SetHardwarePrice("l4x1", 2)
	clk.Add(time.Hour)
	if b2 := hub.Bill("o/gpu"); math.Abs(b2.Dollars-b.Dollars-2) > 1e-9 {
		t.Errorf("after a price change: %+v", b2)
	}
}

func TestHubStartSpread(t *testing.T) {
	durs := func(seed uint64) []time.Duration {
		hub, _, clk := runtimeHub(t)
		hub.SetStartTimes(0, 90*time.Second)
		hub.SetStartSpread(0.5, seed)
		var out []time.Duration
		for range 5 {
			hubCall(t, hub, "POST", "restart", owner, nil)
			start := clk.Now()
			for stageOf(t, hub) != gradiotest.StageRunning {
				clk.Add(time.Second)
			}
			out = append(out, clk.Now().Sub(start))
		}
		return out
	}
	a, b := durs(7), durs(7)
	same, all90 := true, true
	for i := range a {
		same = same && a[i] == b[i]
		all90 = all90 && a[i] == 90*time.Second
	}
	if !same || all90 {
		t.Fatalf("seeded spread: %v and %v", a, b)
	}
}

// TestHubStopRestartsReplica: a Space that stops (here seen through a
// look-up only) loses its process at once: its replica gets a new app id.
func TestHubStopRestartsReplica(t *testing.T) {
	hub, srv, clk := runtimeHub(t)
	hub.SetSleepTime("o/gpu", 60)
	before := srv.AppIDValue()
	clk.Add(61 * time.Second)
	if got := hub.Stage("o/gpu"); got != gradiotest.StageStopped {
		t.Fatalf("stage %s", got)
	}
	if srv.AppIDValue() == before {
		t.Fatal("the replica of a stopped Space kept its process")
	}
	hubCall(t, hub, "POST", "restart", owner, nil)
	clk.Add(150 * time.Second)
	mid := srv.AppIDValue()
	if got := appStatus(t, srv); got != 200 || srv.AppIDValue() != mid {
		t.Fatalf("after the restart: %d, app id changed again: %v", got, srv.AppIDValue() != mid)
	}
}
