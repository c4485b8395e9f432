package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gradiopool/gradiopool/gradio"
)

func TestEndpointLabelsBounded(t *testing.T) {
	cfg := &gradio.Config{}
	for i := range 3 * maxEndpointLabels {
		d := gradio.Dependency{FnIndex: i, BackendFn: true}
		if i%2 == 0 {
			d.APIName = fmt.Sprintf("ep%d", i)
		}
		cfg.Dependencies = append(cfg.Dependencies, d)
	}
	cfg.Dependencies = append(cfg.Dependencies, gradio.Dependency{FnIndex: 999, APIName: "js_only"}) // not a backend fn
	lookups := 0
	now := time.Unix(0, 0)
	e := &endpointLabels{now: func() time.Time { return now }}
	e.setSource(func() map[string]string { lookups++; return endpointLabelsOf(cfg) })
	for _, tc := range []struct{ in, want string }{
		{"ep0", "ep0"}, {"/ep2", "ep2"}, {"fn_index=2", "ep2"}, {"fn_index=1", "fn_1"},
		{"", endpointNone}, {"js_only", endpointOther}, {"no-such-endpoint", endpointOther},
		{fmt.Sprintf("ep%d", 2*maxEndpointLabels), endpointOther}, // past the cap
	} {
		if got := e.label(tc.in); got != tc.want {
			t.Errorf("label(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Random names sent by a caller: one label, and the app's config is
	// not looked up again for each.
	distinct := map[string]bool{}
	for i := range 10 * maxEndpointLabels {
		distinct[e.label(fmt.Sprintf("random-%d", i))] = true
	}
	if len(distinct) != 1 || !distinct[endpointOther] {
		t.Errorf("random names got labels %v, want only %q", distinct, endpointOther)
	}
	if lookups != 1 {
		t.Errorf("%d look-ups of the app's names, want 1 within %v", lookups, endpointRefresh)
	}
	now = now.Add(endpointRefresh)
	e.label("random-again")
	if lookups != 2 {
		t.Errorf("%d look-ups after %v, want 2", lookups, endpointRefresh)
	}
	all := map[string]bool{}
	for _, l := range e.known {
		all[l] = true
	}
	if len(all) > maxEndpointLabels {
		t.Errorf("%d distinct labels, more than the cap %d", len(all), maxEndpointLabels)
	}
}

// TestFailoverAndErrorLabels: failovers carry the door, the replica and
// the bounded endpoint; app errors and other errors are apart.
func TestFailoverAndErrorLabels(t *testing.T) {
	m := NewMetrics(nil)
	m.endpoints.setSource(func() map[string]string { return map[string]string{"upper": "upper", "fn_index=0": "upper"} })
	m.observeFailover(routeFrontDoor, "r1", "fn_index=0")
	m.observeFailover(routeV1, "r2", "whatever")
	m.observeCall(CallRecord{Route: routeCall, Replica: "r1", Endpoint: "upper", Code: "app_error", Total: time.Second})
	m.observeCall(CallRecord{Route: routeFrontDoor, Replica: "", Endpoint: "x", Code: "queue_timeout", Total: time.Second})
	want := `
# HELP gradiopool_failovers_total Calls moved away from a replica because it provably did not accept them, by door (route), the replica left and endpoint.
# TYPE gradiopool_failovers_total counter
gradiopool_failovers_total{endpoint="other",replica="r2",route="v1"} 1
gradiopool_failovers_total{endpoint="upper",replica="r1",route="frontdoor"} 1
# HELP gradiopool_app_errors_total Calls the app answered with an error (gr.Error, an exception in the function): the replica worked. By door, replica and endpoint.
# TYPE gradiopool_app_errors_total counter
gradiopool_app_errors_total{endpoint="upper",replica="r1",route="call"} 1
# HELP gradiopool_call_errors_total Calls failed by the gateway, the pool or the replica (not the app's own errors: see app_errors_total), by door, replica (none: before any), endpoint and error code.
# TYPE gradiopool_call_errors_total counter
gradiopool_call_errors_total{code="queue_timeout",endpoint="other",replica="none",route="frontdoor"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "gradiopool_failovers_total", "gradiopool_app_errors_total", "gradiopool_call_errors_total"); err != nil {
		t.Fatal(err)
	}
}
