package gateway_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/pool"
)

// controlAt posts action for replica at the gateway base and decodes the
// answer.
func controlAt(t *testing.T, base, replica, action string, hdr ...string) (int, gateway.ControlAnswer, string) {
	t.Helper()
	a := do(t, "POST", base+"/api/admin/replicas/"+url.PathEscape(replica)+"/"+action, "", hdr...)
	var out gateway.ControlAnswer
	if a.status == 200 {
		if err := json.Unmarshal([]byte(a.body), &out); err != nil {
			t.Fatalf("answer %s: %v", a.body, err)
		}
	}
	return a.status, out, a.body
}

// operatorOf is the operator state of replica in the gateway's pool-stats.
func operatorOf(t *testing.T, base, replica string, hdr ...string) string {
	t.Helper()
	a := do(t, "GET", base+"/api/admin/pool-stats", "", hdr...)
	var st pool.Stats
	if err := json.Unmarshal([]byte(a.body), &st); err != nil {
		t.Fatalf("pool-stats %d %s: %v", a.status, a.body, err)
	}
	return st.Pools[replica].Operator
}

// TestReplicaControlRoutes: drain, disable and enable through the admin
// API, behind the admin token; the state shows in pool-stats, the metrics
// and the dashboard's event list, survives a reload, and a held replica
// takes no call.
func TestReplicaControlRoutes(t *testing.T) {
	simA := gradiotest.NewServer(gradiotest.DefaultApp())
	defer simA.Close()
	simB := gradiotest.NewServer(gradiotest.DefaultApp())
	defer simB.Close()
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{simA.URL, simB.URL}, MinConnections: 1, MaxConnections: 2}}
	cfg.Secrets.AdminToken = "adm1n-token"
	g, base, logs, _ := reloadGateway(t, cfg)
	auth := []string{"Authorization", "Bearer adm1n-token"}
	a, b := g.Pool().Replicas()[0], g.Pool().Replicas()[1]

	if st, _, _ := controlAt(t, base, a, "drain"); st != 401 {
		t.Errorf("drain without the admin token: %d, want 401", st)
	}
	if st, _, _ := controlAt(t, base, a, "drain", "Authorization", "Bearer wrong"); st != 403 {
		t.Errorf("drain with a wrong token: %d, want 403", st)
	}
	if st, _, body := controlAt(t, base, "nope", "drain", auth...); st != 404 || !strings.Contains(body, "unknown_replica") {
		t.Errorf("unknown replica: %d %s", st, body)
	}
	if st, _, body := controlAt(t, base, a, "pause", auth...); st != 404 || !strings.Contains(body, "drain, disable or enable") {
		t.Errorf("unknown action: %d %s", st, body)
	}
	if got := do(t, "GET", base+"/api/admin/replicas/"+a+"/drain", "", auth...); got.status != 405 {
		t.Errorf("GET drain: %d, want 405", got.status)
	}
	st, out, body := controlAt(t, base, a, "drain", auth...)
	if st != 200 || !out.Changed || out.Operator != pool.OperatorDrained || out.Control != "drain" || out.Cluster {
		t.Fatalf("drain: %d %s", st, body)
	}
	if _, out, _ := controlAt(t, base, a, "drain", auth...); out.Changed {
		t.Error("a second drain reported a change")
	}
	if got := operatorOf(t, base, a, auth...); got != pool.OperatorDrained {
		t.Errorf("pool-stats operator = %q, want drained", got)
	}
	for i := range 4 {
		ans := do(t, "POST", base+"/v1/predict/upper", `{"data":["x"]}`, "X-User-Email", "u"+string(rune('a'+i))+"@example.com")
		if ans.status != 200 || !strings.Contains(ans.body, `"replica":"`+b+`"`) {
			t.Errorf("call %d with %s drained: %d %s", i, a, ans.status, ans.body)
		}
	}
	if _, err := g.Reload(); err != nil { // nothing changed: the control stays
		t.Fatal(err)
	}
	if got := operatorOf(t, base, a, auth...); got != pool.OperatorDrained {
		t.Errorf("after a reload operator = %q, want drained", got)
	}
	if st, out, _ := controlAt(t, base, a, "disable", auth...); st != 200 || out.Operator != pool.OperatorDisabled {
		t.Errorf("disable: %d %+v", st, out)
	}
	m := do(t, "GET", base+"/metrics", "", auth...).body
	if !strings.Contains(m, `gradiopool_replica_operator_state{replica="`+a+`",state="disabled"} 1`) ||
		!strings.Contains(m, `gradiopool_replica_operator_state{replica="`+b+`",state="enabled"} 1`) {
		t.Errorf("metrics lack the operator state:\n%s", grepLines(m, "operator_state"))
	}
	if st, _, _ := controlAt(t, base, b, "drain", auth...); st != 200 {
		t.Fatalf("drain %s: %d", b, st)
	}
	if ans := do(t, "POST", base+"/v1/predict/upper", `{"data":["x"]}`); ans.status != 503 || !strings.Contains(ans.body, `"code":"replica_unavailable"`) ||
		!strings.Contains(ans.body, "disabled by an operator") || ans.header.Get("Retry-After") == "" {
		t.Errorf("call with every replica held: %d %s", ans.status, ans.body)
	}
	if st, _, _ := controlAt(t, base, b, "enable", auth...); st != 200 {
		t.Fatalf("enable %s: %d", b, st)
	}
	if st, out, _ := controlAt(t, base, a, "enable", auth...); st != 200 || out.Operator != pool.OperatorEnabled {
		t.Errorf("enable: %d %+v", st, out)
	}
	h := do(t, "GET", base+"/api/admin/history", "", auth...).body
	for _, want := range []string{`"kind":"control","replica":"` + a + `","reason":"drain"`, `"reason":"disable"`, `"reason":"enabled"`} {
		if !strings.Contains(h, want) {
			t.Errorf("history events lack %s:\n%s", want, h)
		}
	}
	if !strings.Contains(logs.String(), `"msg":"replica control"`) {
		t.Error("no log line for the control")
	}
}

// grepLines keeps the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestReplicaControlAcrossGateways: in a cluster a replica drained at
// gateway A is held at gateway B too (the control is in Redis), and
// enabled at B it serves at A again.
func TestReplicaControlAcrossGateways(t *testing.T) {
	simA := gradiotest.NewServer(gradiotest.DefaultApp())
	defer simA.Close()
	simB := gradiotest.NewServer(gradiotest.DefaultApp())
	defer simB.Close()
	cfg := clusterConfig(t, "ctltest", []string{simA.URL, simB.URL}, 4, 3*time.Second)
	urls, gws := openGateways(t, cfg, 2)
	a := gws[0].Pool().Replicas()[0]
	// No admin token here: a cross-site request (a form on another site)
	// is still refused.
	if st, _, body := controlAt(t, urls[0], a, "drain", "Sec-Fetch-Site", "cross-site"); st != 403 {
		t.Errorf("cross-site drain: %d %s, want 403", st, body)
	}
	st, out, body := controlAt(t, urls[0], a, "drain")
	if st != 200 || !out.Cluster {
		t.Fatalf("drain at A: %d %s", st, body)
	}
	fdtest.WaitFor(t, "B holds the replica", func() bool { return gws[1].Pool().Controls()[a] == pool.ControlDrain })
	if got := operatorOf(t, urls[1], a); got != pool.OperatorDrained {
		t.Errorf("B's pool-stats operator = %q, want drained", got)
	}
	if st, _, body := controlAt(t, urls[1], a, "enable"); st != 200 {
		t.Fatalf("enable at B: %d %s", st, body)
	}
	fdtest.WaitFor(t, "A releases the replica", func() bool { _, held := gws[0].Pool().Controls()[a]; return !held })
}
