package gateway_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// BenchmarkFrontDoorForwarded measures what a forwarded request costs: one
// front-door call (queue/join, then queue/data to its completion) of a
// session gateway A owns, sent to A (direct) or to gateway B, which
// forwards both requests to A (forwarded), side by side in one run, over
// a simulated replica answering at once. It reports the calls' p50 and
// p99 latency.
//
//	go test -run '^$' -bench BenchmarkFrontDoorForwarded -benchtime 2000x ./gateway/
func BenchmarkFrontDoorForwarded(b *testing.B) {
	sim := gradiotest.NewUnstartedServer(nil)
	sim.DefaultConcurrencyLimit = -1
	sim.Start()
	b.Cleanup(sim.Close)
	cfg := clusterConfig(b, "fdbench", []string{sim.URL}, 64, 10*time.Second)
	urls, _ := openGateways(b, cfg, 2)
	upper := fdtest.FnIndex(b, urls[0], "upper")
	const sessions = 32
	for i := range sessions { // A owns them: their first join reached A
		if _, err := fdtest.CallErr(urls[0], fmt.Sprintf("bench%d", i), upper, "x"); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		to   string
	}{{"direct", urls[0]}, {"forwarded", urls[1]}} {
		b.Run(tc.name, func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if _, err := fdtest.CallErr(tc.to, fmt.Sprintf("bench%d", i%sessions), upper, "x"); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
		})
	}
}
