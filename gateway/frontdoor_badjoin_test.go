package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/pool"
)

// badJoin posts a join of an fn_index no replica has (real Gradio answers
// it 500, with a Python traceback from 5.0 to 6.8: the simulators' default
// mode) and returns the front door's answer.
func badJoin(t *testing.T, base, session string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"data":["x"],"fn_index":999,"session_hash":%q,"event_data":null,"trigger_id":null}`, session)
	resp, err := http.Post(base+"/gradio_api/queue/join", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

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
				st, body := badJoin(t, srv.URL, fmt.Sprintf("bad%d", i))
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
					if strings.Contains(body, replicaName(s)) {
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
			if got := fdCall(t, srv.URL, "bad0", fnIndexOf(t, srv.URL, "upper"), "ok"); got != "OK" {
				t.Errorf("a good join after the bad ones: %q", got)
			}
		})
	}
}
