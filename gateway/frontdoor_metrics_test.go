package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorCallsInMetrics: front-door calls are counted like the other
// doors' (issue 22: calls_total stayed at 1 while the front door served
// 62): a completed call, an app error (gr.Error: apart from failures) and
// a lost call, under route="frontdoor" with the replica and the endpoint's
// API name.
func TestFrontDoorCallsInMetrics(t *testing.T) {
	srv, g, sims, _ := frontGateway(t, 1, nil)
	replica := strings.TrimPrefix(sims[0].URL, "http://")
	upper, fail, count := fdtest.FnIndex(t, srv.URL, "upper"), fdtest.FnIndex(t, srv.URL, "fail"), fdtest.FnIndex(t, srv.URL, "count")
	if got := fdtest.Call(t, srv.URL, "m1", upper, "hi"); got != "HI" {
		t.Fatalf("upper: %q", got)
	}
	id, err := fdtest.Join(srv.URL, "m1", fail, "x")
	if err != nil {
		t.Fatal(err)
	}
	done, err := fdtest.Stream(srv.URL, "m1")
	if err != nil || done[id] == nil || done[id]["success"] != false {
		t.Fatalf("fail: %v %v", done, err)
	}
	sims[0].CutNextStreams(1)
	id, err = fdtest.Join(srv.URL, "m2", count, 3)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := fdtest.Stream(srv.URL, "m2"); err != nil || done[id] == nil || done[id]["success"] != false {
		t.Fatalf("lost call: %v %v", done, err)
	}
	reg := g.Metrics().Registry()
	want := `
# HELP gradiopool_calls_total Ended calls by door (route: v1, call, frontdoor), replica (none: failed before any) and result (ok, app_error, error).
# TYPE gradiopool_calls_total counter
gradiopool_calls_total{replica="R",result="app_error",route="frontdoor"} 1
gradiopool_calls_total{replica="R",result="error",route="frontdoor"} 1
gradiopool_calls_total{replica="R",result="ok",route="frontdoor"} 1
# HELP gradiopool_app_errors_total Calls the app answered with an error (gr.Error, an exception in the function): the replica worked. By door, replica and endpoint.
# TYPE gradiopool_app_errors_total counter
gradiopool_app_errors_total{endpoint="fail",replica="R",route="frontdoor"} 1
# HELP gradiopool_call_errors_total Calls failed by the gateway, the pool or the replica (not the app's own errors: see app_errors_total), by door, replica (none: before any), endpoint and error code.
# TYPE gradiopool_call_errors_total counter
gradiopool_call_errors_total{code="replica_lost",endpoint="count",replica="R",route="frontdoor"} 1
`
	want = strings.ReplaceAll(want, `"R"`, `"`+replica+`"`)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gradiopool_calls_total", "gradiopool_app_errors_total", "gradiopool_call_errors_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "gradiopool_call_duration_seconds"); n == 0 {
		t.Error("no call_duration_seconds series for the front door")
	}
}

// TestFrontDoorAccessLines: the front door's access lines carry the
// user's tag (never the e-mail), the replica, the route, the status and,
// for a failed join, the error code.
func TestFrontDoorAccessLines(t *testing.T) {
	srv, _, sims, _, logs := frontGatewayApps(t, []*gradiotest.App{gradiotest.DefaultApp()}, nil)
	upper := fdtest.FnIndex(t, srv.URL, "upper")
	body := fmt.Sprintf(`{"data":["hi"],"fn_index":%d,"session_hash":"acc1","event_data":null,"trigger_id":null}`, upper)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/gradio_api/queue/join", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(gateway.UserHeader, "alice@example.com")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("join: %d", resp.StatusCode)
	}
	if _, err := fdtest.Stream(srv.URL, "acc1"); err != nil {
		t.Fatal(err)
	}
	replica := fdtest.ReplicaName(sims[0])
	var join, data map[string]any
	// A stream's access line is written once its handler returned, which
	// may be just after the caller read the stream's end.
	fdtest.WaitFor(t, "the access lines of the join and the stream", func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "http request" {
				continue
			}
			switch m["path"] {
			case "/gradio_api/queue/join":
				join = m
			case "/gradio_api/queue/data":
				data = m
			}
		}
		return join != nil && data != nil
	})
	if join == nil || data == nil {
		t.Fatalf("no access lines for the join and the stream:\n%s", logs)
	}
	if join["replica"] != replica || join["user"] == nil || join["user"] == "" || join["status"] != 200.0 || join["route"] == nil {
		t.Errorf("join's access line %v: want replica %s, a user tag, status and route", join, replica)
	}
	if strings.Contains(logs.String(), "alice@example.com") {
		t.Error("the e-mail is in the logs")
	}
	if data["replica"] != replica {
		t.Errorf("stream's access line %v: want replica %s", data, replica)
	}
}
