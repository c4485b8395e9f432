package gateway_test

import (
	"encoding/json"
	"strings"
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
		{"cluster", func(c *gateway.Config) {
			c.Autoscale.Mode, c.Secrets.HFToken, c.Cluster.RedisURL, c.Secrets.HashKey = "on", "hf_x", "redis://127.0.0.1:1", "k"
		}, "cluster"},
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
