package gateway_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFrontDoorCallsInMetrics: front-door calls are counted like the other
// doors' (issue 22: calls_total stayed at 1 while the front door served
// 62): a completed call, an app error (gr.Error: apart from failures) and
// a lost call, under route="frontdoor" with the replica and the endpoint's
// API name.
func TestFrontDoorCallsInMetrics(t *testing.T) {
	srv, g, sims, _ := frontGateway(t, 1, nil)
	replica := strings.TrimPrefix(sims[0].URL, "http://")
	upper, fail, count := fnIndexOf(t, srv.URL, "upper"), fnIndexOf(t, srv.URL, "fail"), fnIndexOf(t, srv.URL, "count")
	if got := fdCall(t, srv.URL, "m1", upper, "hi"); got != "HI" {
		t.Fatalf("upper: %q", got)
	}
	id, err := fdJoin(srv.URL, "m1", fail, "x")
	if err != nil {
		t.Fatal(err)
	}
	done, err := fdStream(srv.URL, "m1")
	if err != nil || done[id] == nil || done[id]["success"] != false {
		t.Fatalf("fail: %v %v", done, err)
	}
	sims[0].CutNextStreams(1)
	id, err = fdJoin(srv.URL, "m2", count, 3)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := fdStream(srv.URL, "m2"); err != nil || done[id] == nil || done[id]["success"] != false {
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
