package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
)

// TestMadeUpNamesAndUsersStayBounded (issue 33): calls to made-up endpoint
// names through every call route are 404s that record nothing (pool-stats,
// metrics and history keep their size and never name them); many distinct
// users keep at most pool.max_user_assignments assignments, the evictions
// counted in pool-stats and in a metric.
func TestMadeUpNamesAndUsersStayBounded(t *testing.T) {
	const limit = 64
	srv, _, _, _ := frontGateway(t, 1, func(c *gateway.Config) { c.Pool.MaxUserAssignments = limit })
	if a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`); a.status != http.StatusOK {
		t.Fatalf("a real call: %d %s", a.status, a.body)
	}
	read := func(path string) string { return do(t, "GET", srv.URL+path, "").body }
	flood := func(from, to int) {
		for i := from; i < to; i++ {
			name := fmt.Sprintf("madeup%d", i)
			path := []string{"/v1/predict/", "/v1/submit/", "/gradio_api/call/"}[i%3] + name
			a := do(t, "POST", srv.URL+path, `{"data":["x"]}`, "X-Gradiopool-User", fmt.Sprintf("flood%d@example.com", i))
			if a.status != http.StatusNotFound {
				t.Fatalf("POST %s: %d %s, want 404", path, a.status, a.body)
			}
		}
	}
	// The first few 404s add the rows every 404 has (per route and
	// status); the flood after them must add nothing.
	flood(0, 30)
	_, _, _ = read("/api/admin/pool-stats"), read("/metrics"), read("/api/admin/history") // their own rows
	statsBefore, metricsBefore, historyBefore := read("/api/admin/pool-stats"), read("/metrics"), read("/api/admin/history")
	const n = 600
	flood(30, n)
	statsAfter, metricsAfter, historyAfter := read("/api/admin/pool-stats"), read("/metrics"), read("/api/admin/history")
	for _, doc := range []struct{ name, before, after string }{
		{"pool-stats", statsBefore, statsAfter}, {"metrics", metricsBefore, metricsAfter}, {"history", historyBefore, historyAfter},
	} {
		if strings.Contains(doc.after, "madeup") {
			t.Errorf("%s names a made-up endpoint", doc.name)
		}
		// Counters may gain a digit or two; a row per name would add
		// tens of kilobytes.
		if len(doc.after) > len(doc.before)+512 {
			t.Errorf("%s grew from %d to %d bytes after %d calls to made-up names", doc.name, len(doc.before), len(doc.after), n)
		}
	}
	var st struct {
		UserAssignments        int    `json:"userAssignments"`
		UserAssignmentsEvicted uint64 `json:"userAssignmentsEvicted"`
	}
	if err := json.Unmarshal([]byte(statsAfter), &st); err != nil || st.UserAssignments > 1 {
		t.Errorf("made-up names assigned users: %d assignments (%v)", st.UserAssignments, err)
	}

	const users = 300
	for i := range users {
		if a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`, "X-Gradiopool-User", fmt.Sprintf("user%d@example.com", i)); a.status != http.StatusOK {
			t.Fatalf("call of user %d: %d %s", i, a.status, a.body)
		}
	}
	if err := json.Unmarshal([]byte(read("/api/admin/pool-stats")), &st); err != nil {
		t.Fatal(err)
	}
	if st.UserAssignments > limit || st.UserAssignmentsEvicted < users-limit {
		t.Errorf("after %d users: %d assignments (bound %d), %d evicted", users, st.UserAssignments, limit, st.UserAssignmentsEvicted)
	}
	want := fmt.Sprintf("gradiopool_user_assignments_evicted_total %d", st.UserAssignmentsEvicted)
	if m := read("/metrics"); !strings.Contains(m, want) {
		t.Errorf("metrics lack %q", want)
	}
}
