package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestFrontDoorBadJoinsAreTheCallers (issue 20, "three bad joins eject
// every replica"): joins of an unknown fn_index are answered 400 in
// Gradio's shape without the replica's traceback or address, each goes to
// one replica only (never retried elsewhere), none counts as a refusal, so
// every replica stays ready and other callers' /v1 calls are served.
func TestFrontDoorBadJoinsAreTheCallers(t *testing.T) {
	for _, n := range []int{3, 30} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			srv, g, sims, p := frontGateway(t, 3, nil)
			for i := range n {
				st, body := fdtest.BadJoin(t, srv.URL, fmt.Sprintf("bad%d", i))
				var v struct {
					Detail string `json:"detail"`
				}
				if st != http.StatusBadRequest || json.Unmarshal([]byte(body), &v) != nil || v.Detail == "" {
					t.Fatalf("bad join %d: %d %s, want 400 {\"detail\": ...}", i, st, body)
				}
				for _, leak := range []string{"Traceback", "KeyError", "site-packages"} {
					if strings.Contains(body, leak) {
						t.Fatalf("bad join %d: the replica's traceback reached the caller: %s", i, body)
					}
				}
				for _, s := range sims {
					if strings.Contains(body, fdtest.ReplicaName(s)) {
						t.Fatalf("bad join %d: a replica's address reached the caller: %s", i, body)
					}
				}
			}
			st := g.FrontDoor().Stats()
			if st.Refused != 0 || st.CallerFaults != uint64(n) || st.Joins != uint64(n) {
				t.Errorf("front door stats: %d joins, %d refused, %d refused for their input; want %d, 0, %d", st.Joins, st.Refused, st.CallerFaults, n, n)
			}
			for name, r := range p.Stats(t.Context()).Pools {
				if r.State == pool.StateEjected || r.Failovers != 0 {
					t.Errorf("replica %s after %d bad joins: state %s, %d failovers", name, n, r.State, r.Failovers)
				}
			}
			if a := do(t, "GET", srv.URL+"/readyz", ""); a.status != http.StatusOK {
				t.Errorf("readyz after %d bad joins: %d %s", n, a.status, a.body)
			}
			for i := range 6 {
				a := do(t, "POST", srv.URL+"/v1/predict/upper", fmt.Sprintf(`{"data":["v%d"]}`, i), "X-Gradiopool-User", fmt.Sprintf("other%d@example.com", i))
				if a.status != http.StatusOK || !strings.Contains(a.body, fmt.Sprintf("V%d", i)) {
					t.Errorf("another caller's /v1 call %d: %d %s", i, a.status, a.body)
				}
			}
			// A good join of the same sessions still works.
			if got := fdtest.Call(t, srv.URL, "bad0", fdtest.FnIndex(t, srv.URL, "upper"), "ok"); got != "OK" {
				t.Errorf("a good join after the bad ones: %q", got)
			}
		})
	}
}
