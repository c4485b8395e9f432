package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestFrontDoorReadGraceInCluster (issue 20 item 3): two gateways share a
// Redis. A join on gateway A whose caller opens no data stream anywhere is
// cancelled once frontdoor.read_grace passes and its slot freed (before,
// the grace was off in a cluster: such a join held its slot for the
// call's whole run). A join on A whose caller reads its stream on gateway
// B runs to its end: B marks the session in Redis while its stream is
// open, and A finds the mark when the grace passes.
func TestFrontDoorReadGraceInCluster(t *testing.T) {
	rs := redistest.StartServer(t)
	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{sim.URL}, MinConnections: 1, MaxConnections: 2, QueueTimeout: 3 * time.Second},
		Cluster: gateway.ClusterConfig{Name: "gracetest", LeaseTTL: 2 * time.Second}}
	cfg.FrontDoor.ReadGrace = 300 * time.Millisecond
	cfg.Secrets.HashKey = "k"
	cfg.Secrets.RedisURL = "redis://" + rs.Addr + "/0"
	urls, gws := openGateways(t, cfg, 2)
	slow := fdtest.FnIndex(t, urls[0], "slow")
	join := func(hash string, seconds float64) string {
		t.Helper()
		body := fmt.Sprintf(`{"data":[%g],"fn_index":%d,"session_hash":%q,"event_data":null,"trigger_id":null}`, seconds, slow, hash)
		resp, err := http.Post(urls[0]+"/gradio_api/queue/join", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var j struct {
			EventID string `json:"event_id"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &j) != nil || j.EventID == "" {
			t.Fatalf("join %s on gateway A: %d %s", hash, resp.StatusCode, b)
		}
		return j.EventID
	}

	// Never read: cancelled at the grace, its slot freed long before its
	// 60 s run would end.
	join("never-read", 60)
	fdtest.WaitFor(t, "gateway A cancelling the unread call", func() bool {
		st := gws[0].FrontDoor().Stats()
		return st.NotRead == 1 && st.InFlight == 0
	})

	// Read on gateway B: runs to its end, past the grace.
	id := join("read-on-b", 1.5)
	resp, err := http.Get(urls[1] + "/gradio_api/queue/data?session_hash=read-on-b")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"process_completed"`) || !strings.Contains(string(b), id) || !strings.Contains(string(b), `"success":true`) {
		t.Fatalf("the call read on gateway B did not complete:\n%s", b)
	}
	if n := gws[0].FrontDoor().Stats().NotRead; n != 1 {
		t.Fatalf("gateway A cancelled %d calls as not read, want only the unread one", n)
	}
	fdtest.WaitFor(t, "gateway A freeing the read call's slot", func() bool { return gws[0].FrontDoor().Stats().InFlight == 0 })
}
