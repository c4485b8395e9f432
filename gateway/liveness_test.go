package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestIdleReplicaDeathShown (issue 36 item 1): the only replica dies while
// idle (no call in flight, none after). At the default liveness interval
// the gateway shows it down within seconds: /readyz 503,
// gradiopool_replica_up 0, and pool-stats (the dashboard's data) counts
// none of its sessions healthy or available. Before, all three said "up" for 5 min 20 s.
func TestIdleReplicaDeathShown(t *testing.T) {
	srv, sims, _ := realGateway(t, 1, nil)
	if a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`); a.status != 200 {
		t.Fatalf("call: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/readyz", ""); a.status != http.StatusOK {
		t.Fatalf("readyz before: %d %s", a.status, a.body)
	}
	sims[0].Close()
	killed := time.Now()
	fdtest.WaitFor(t, "readyz 503", func() bool { return do(t, "GET", srv.URL+"/readyz", "").status == http.StatusServiceUnavailable })
	t.Logf("/readyz 503 %v after the idle replica died", time.Since(killed).Round(time.Millisecond))
	var st struct {
		Pools map[string]struct {
			State                string `json:"state"`
			HealthyConnections   int    `json:"healthyConnections"`
			AvailableConnections int    `json:"availableConnections"`
		} `json:"pools"`
	}
	a := do(t, "GET", srv.URL+"/api/admin/pool-stats", "")
	if err := json.Unmarshal([]byte(a.body), &st); err != nil {
		t.Fatalf("pool-stats: %v: %s", err, a.body)
	}
	for name, r := range st.Pools {
		if r.State == "ready" || r.HealthyConnections != 0 || r.AvailableConnections != 0 {
			t.Errorf("pool-stats of the dead replica %s: %+v", name, r)
		}
	}
	m := do(t, "GET", srv.URL+"/metrics", "").body
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, "gradiopool_replica_up{") && !strings.HasSuffix(line, " 0") {
			t.Errorf("the dead replica: %s", line)
		}
		if strings.HasPrefix(line, "gradiopool_replica_state{") && strings.Contains(line, `state="ready"`) && !strings.HasSuffix(line, " 0") {
			t.Errorf("the dead replica: %s", line)
		}
	}
}
