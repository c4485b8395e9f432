package gateway

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The files under deploy/ whose queries must use only metrics the gateway
// exports.
var deployFiles = []string{
	"../deploy/grafana/gradiopool.json",
	"../deploy/prometheus/alerts.yml",
	"../deploy/prometheus/alerts_test.yml",
}

var (
	fqName = regexp.MustCompile(`fqName: "([^"]+)"`)
	// metricRef is a metric name in a PromQL expression: the gateway's
	// own, and the process and Go collectors' it registers.
	metricRef = regexp.MustCompile(`\b(gradiopool_[a-z0-9_]+|process_[a-z0-9_]+|go_[a-z0-9_]+)\b`)
)

// exportedNames is every metric name the gateway registers (its own
// collectors, the pool's and the front door's gauges, build info, the Go
// and process collectors), with a histogram's series names.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	m := NewMetrics(newStatsBackend("r1"))
	m.register(&frontDoorCollector{}) // Describe only: no front door needed
	ch := make(chan *prometheus.Desc, 4096)
	for _, c := range m.all {
		c.Describe(ch)
	}
	close(ch)
	names := map[string]bool{}
	for d := range ch {
		sm := fqName.FindStringSubmatch(d.String())
		if sm == nil {
			t.Fatalf("no name in %s", d)
		}
		names[sm[1]] = true
	}
	// Histograms: their series names.
	for _, c := range m.all {
		if h, ok := c.(*prometheus.HistogramVec); ok {
			ch := make(chan *prometheus.Desc, 1)
			h.Describe(ch)
			n := fqName.FindStringSubmatch((<-ch).String())[1]
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[n+s] = true
			}
		}
	}
	return names
}

func TestDeployQueriesUseExportedMetrics(t *testing.T) {
	names := exportedNames(t)
	for _, want := range []string{"gradiopool_calls_total", "gradiopool_replica_state", "gradiopool_build_info",
		"gradiopool_frontdoor_sessions", "gradiopool_session_wait_seconds_bucket", "process_start_time_seconds"} {
		if !names[want] {
			t.Fatalf("%s is not among the exported names: the check is not seeing every collector", want)
		}
	}
	for _, f := range deployFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		refs := metricRef.FindAllString(string(b), -1)
		if len(refs) == 0 {
			t.Errorf("%s: no metric referenced", f)
		}
		var unknown []string
		for _, r := range refs {
			if !names[r] && !slices.Contains(unknown, r) {
				unknown = append(unknown, r)
			}
		}
		if len(unknown) > 0 {
			t.Errorf("%s uses metrics the gateway does not export: %s", filepath.Base(f), strings.Join(unknown, ", "))
		}
	}
}
