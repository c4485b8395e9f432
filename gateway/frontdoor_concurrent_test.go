package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// concurrentRounds is how many rounds each case of
// TestFrontDoorConcurrentCallsNeverHang runs in a row.
const concurrentRounds = 50

// TestFrontDoorConcurrentCallsNeverHang: one official JS client's calls at
// once, 50 rounds in a row, on one gateway and behind a round-robin
// balancer over two and three gateways of a cluster: four calls beside a
// long one (the conformance suite's submit/multiplexed_one_client), and
// twelve calls at once with nothing else running, whose joins are
// answered around the stream's close_stream (the client's close race),
// then four workers' calls one after another. Every round must get every
// answer; a hang fails the round at the script's hang guard, which
// prints what the client holds (its stream open or not, the calls it
// waits for).
func TestFrontDoorConcurrentCallsNeverHang(t *testing.T) {
	fdtest.NodeOrSkip(t)
	for _, mode := range []string{"multiplexed", "many"} {
		for _, gateways := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/%d", mode, gateways), func(t *testing.T) {
				sim := gradiotest.NewUnstartedServer(nil)
				// Calls at once really run at once: the session's last
				// call may end (and its stream close) while other joins
				// of the client are on their way.
				sim.DefaultConcurrencyLimit = -1
				sim.Start()
				t.Cleanup(sim.Close)
				var base string
				var gws []*gateway.Gateway
				if gateways == 1 {
					srv, _, _ := frontGatewayOver(t, []string{sim.URL}, nil)
					base = srv.URL
				} else {
					var urls []string
					urls, gws = openGateways(t, clusterConfig(t, "fdconc", []string{sim.URL}, 16, 10*time.Second), gateways)
					base = roundRobin(t, urls)
				}
				defer func() {
					for i, g := range gws { // a hang must not be a live owner taken for lost
						if n := metricValue(t, g, "gradiopool_cluster_owners_lost_total"); n != 0 {
							t.Errorf("gateway %d took %v owners for lost", i, n)
						}
					}
				}()
				checks := fdtest.RunNode(t, "concurrent_calls.mjs", base+"/", mode, strconv.Itoa(concurrentRounds), "--timeout-ms", "20000")
				for _, c := range checks {
					if !c.OK {
						t.Fatalf("%s: %s", c.Name, c.Detail)
					}
				}
				if len(checks) != concurrentRounds {
					t.Fatalf("%d rounds ran, want %d", len(checks), concurrentRounds)
				}
			})
		}
	}
}

// TestFrontDoorLateCloseStreamNeverHangs: the official JS client's close
// race, with the caller's close_stream late. A close_stream that reaches
// the client after the answer of a join the client sent before it read
// it leaves that call on a stream the client then closes (PROTOCOL.md
// 4.8): the call's messages are never read and the client waits for
// ever. The gateway answers a join of a session whose stream is closing
// only once its caller let go of that stream, or closeAckWait (1 s) after
// close_stream was written when the let-go cannot be seen (Node's fetch
// sometimes keeps an aborted stream's connection). So a close_stream up to
// that late must not hang: here a proxy holds every write that carries
// one for lateBy. With the wait at 0 the first or second round hangs; a
// close_stream later than closeAckWait hangs (1.5 s: the first round,
// measured), as it would on Gradio itself, which answers joins at once.
func TestFrontDoorLateCloseStreamNeverHangs(t *testing.T) {
	fdtest.NodeOrSkip(t)
	const lateBy, rounds = 200 * time.Millisecond, 5
	sim := gradiotest.NewUnstartedServer(nil)
	sim.DefaultConcurrencyLimit = -1
	sim.Start()
	t.Cleanup(sim.Close)
	srv, _, _ := frontGatewayOver(t, []string{sim.URL}, nil)
	target, _ := url.Parse(srv.URL)
	p := httputil.NewSingleHostReverseProxy(target)
	p.FlushInterval = -1
	late := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		p.ServeHTTP(&lateCloseWriter{ResponseWriter: w, by: lateBy}, r)
	}))
	t.Cleanup(func() {
		late.CloseClientConnections()
		late.Close()
	})
	checks := fdtest.RunNode(t, "concurrent_calls.mjs", late.URL+"/", "many", strconv.Itoa(rounds), "--timeout-ms", "20000")
	for _, c := range checks {
		if !c.OK {
			t.Fatalf("%s: %s", c.Name, c.Detail)
		}
	}
	if len(checks) != rounds {
		t.Fatalf("%d rounds ran, want %d", len(checks), rounds)
	}
}

// lateCloseWriter holds each write that carries a close_stream for by.
type lateCloseWriter struct {
	http.ResponseWriter
	by time.Duration
}

func (w *lateCloseWriter) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(`"close_stream"`)) {
		time.Sleep(w.by)
	}
	return w.ResponseWriter.Write(b)
}

func (w *lateCloseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// metricValue is the value of g's metric name (one series, no labels).
func metricValue(t *testing.T, g *gateway.Gateway, name string) float64 {
	t.Helper()
	mfs, err := g.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
