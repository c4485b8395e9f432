package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
)

// TestRealUnreadJoinsNeverRun is TestFrontDoorUnreadJoinsNeverRun on REAL
// Gradio servers speaking sse_v3 (4.44, 5.x, 6.x: the front door relays
// them), one at a time, named in GRADIOPOOL_REAL_RELAYED (comma-separated
// URLs of the reference app, testdata/realgradio/app.py). A slow call
// holds the app's one running place; three joins nobody reads follow, one
// holding the gateway's second slot (queued at the replica), two waiting
// in the gateway's queue. After read_grace a probe call made straight at
// the replica is told it is first in line (rank 0): nothing the gateway gave
// up is still queued there. Skipped without the variable.
func TestRealUnreadJoinsNeverRun(t *testing.T) {
	v := os.Getenv("GRADIOPOOL_REAL_RELAYED")
	if v == "" {
		t.Skip("GRADIOPOOL_REAL_RELAYED is not set (comma-separated URLs of real sse_v3 Gradio apps)")
	}
	for _, u := range strings.Split(v, ",") {
		t.Run(u, func(t *testing.T) {
			srv, _, _ := frontGatewayOver(t, []string{u}, func(c *gateway.Config) {
				c.Pool.MaxConnections = 2
				c.Pool.QueueTimeout = time.Minute
			})
			slow := strconv.Itoa(fnIndexOf(t, srv.URL, "slow"))
			joinAt(t, srv.URL, "realocc", `"data":[15],"fn_index":`+slow)
			occ := fdMessages(t, srv.URL, "realocc")
			waitMsg(t, occ, "process_starts")
			for i := range 3 {
				joinAt(t, srv.URL, "realunread"+strconv.Itoa(i), `"data":[1],"fn_index":`+slow)
			}
			time.Sleep(frontdoorGrace + 2*time.Second)
			rank := probeRank(t, u, slow)
			if rank != 0 {
				t.Fatalf("a call joined straight at the replica after the grace is at rank %d: calls the gateway gave up are still queued there", rank)
			}
			t.Logf("%s: a probe after the grace is first in line (rank 0)", u)
		})
	}
}

// probeRank joins slow(1) straight at the real app u under a session of
// its own and returns the rank of its first estimation (-1: none seen
// before it started).
func probeRank(t *testing.T, u, fn string) int {
	t.Helper()
	c, err := gradio.Connect(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hash := "probe" + strconv.FormatInt(time.Now().UnixNano(), 36)
	body := `{"data":[1],"fn_index":` + fn + `,"session_hash":"` + hash + `","event_data":null,"trigger_id":null}`
	resp, err := http.Post(c.URL("queue/join"), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	data, err := http.Get(c.URL("queue/data") + "?session_hash=" + hash)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Body.Close()
	sc := bufio.NewScanner(data.Body)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m struct {
			Msg  string `json:"msg"`
			Rank *int   `json:"rank"`
		}
		if json.Unmarshal([]byte(d), &m) != nil {
			continue
		}
		switch m.Msg {
		case "estimation":
			if m.Rank != nil {
				return *m.Rank
			}
		case "process_starts":
			return -1
		}
	}
	t.Fatal(fmt.Errorf("the probe's stream ended: %v", sc.Err()))
	return -1
}
