package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestFrontDoorAcrossGateways: two gateways share a Redis; a caller's
// queue/join reaches one and its queue/data the other (a plain load
// balancer). The stream finds the session through Redis, and the slot the
// first gateway took is released when the second relays the end: with a
// limit of 2, five such calls in a row all run.
func TestFrontDoorAcrossGateways(t *testing.T) {
	sim := gradiotest.NewUnstartedServer(nil)
	sim.StepDelay = 2 * time.Millisecond
	sim.Start()
	t.Cleanup(sim.Close)
	cfg := clusterConfig(t, "fdtest", []string{sim.URL}, 2, 3*time.Second)
	urls, gws := openGateways(t, cfg, 2)
	for i := range 5 {
		hash := fmt.Sprintf("split%d", i)
		id := fdtest.JoinAt(t, urls[0], hash, `"data":[3],"fn_index":1`)
		resp, err := http.Get(urls[1] + "/gradio_api/queue/data?session_hash=" + hash)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `"process_completed"`) || !strings.Contains(string(b), id) || !strings.Contains(string(b), `"success":true`) {
			t.Fatalf("call %d: stream on gateway B:\n%s", i, b)
		}
	}
	waitInFlight(t, gws[0], 0)
}

// openGateways opens n gateways of cfg (sharing its Redis), each served on
// 127.0.0.1, closed at the end of the test.
func openGateways(t testing.TB, cfg gateway.Config, n int) (urls []string, gws []*gateway.Gateway) {
	t.Helper()
	for range n {
		// Each gateway advertises its own address: the others forward the
		// requests of the sessions it owns there.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := cfg
		cfg.Cluster.AdvertiseURL = "http://" + ln.Addr().String()
		logs := &logbuf.Buffer{}
		g, err := gateway.Open(context.Background(), cfg, slog.New(slog.NewJSONHandler(logs, nil)))
		if err != nil {
			ln.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() { // what the gateway saw, for the failure
				lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
				t.Logf("gateway at %s logged (last %d of %d lines):\n%s", ln.Addr(), min(len(lines), 60), len(lines), strings.Join(lines[max(0, len(lines)-60):], "\n"))
			}
		})
		urls = append(urls, serveGateway(t, ln, g))
		gws = append(gws, g)
	}
	return urls, gws
}

// serveGateway serves g on ln until the end of the test, then closes it,
// and returns its URL.
func serveGateway(t testing.TB, ln net.Listener, g *gateway.Gateway) string {
	srv := httptest.NewUnstartedServer(g)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = g.Close(context.Background())
	})
	return srv.URL
}

// TestFrontDoorAcrossGatewaysTwoCalls: two calls of one session join at
// gateway A, its stream is read at gateway B, which knows neither call:
// the first completion must not end the caller's stream (B cannot tell it
// was the session's last; the replica's close_stream does), so both
// completions reach the caller.
func TestFrontDoorAcrossGatewaysTwoCalls(t *testing.T) {
	sim := gradiotest.NewUnstartedServer(nil)
	sim.StepDelay = 30 * time.Millisecond
	sim.Start()
	t.Cleanup(sim.Close)
	cfg := clusterConfig(t, "fdtwo", []string{sim.URL}, 4, 3*time.Second)
	urls, gws := openGateways(t, cfg, 2)
	const hash = "twocalls0"
	ids := []string{fdtest.JoinAt(t, urls[0], hash, `"data":[6],"fn_index":1`), fdtest.JoinAt(t, urls[0], hash, `"data":["a"],"fn_index":0`)}
	resp, err := http.Get(urls[1] + "/gradio_api/queue/data?session_hash=" + hash)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, id := range ids {
		if !strings.Contains(string(b), `"msg":"process_completed","event_id":"`+id+`"`) {
			t.Fatalf("stream on gateway B lacks the completion of %s:\n%s", id, b)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(string(b)), `"close_stream","event_id":null}`) {
		t.Fatalf("stream on gateway B does not end with close_stream:\n%s", b)
	}
	waitInFlight(t, gws[0], 0)
}

// clusterConfig is a gateway configuration whose gateways are one cluster
// (name) through a redis-server of the test's own, over replicas with
// maxConns slots each (for the whole cluster) and queueTimeout.
func clusterConfig(t testing.TB, name string, replicas []string, maxConns int, queueTimeout time.Duration) gateway.Config {
	t.Helper()
	rs := redistest.StartServer(t)
	cfg := gateway.Config{Pool: pool.Config{Replicas: replicas, MinConnections: 1, MaxConnections: maxConns, QueueTimeout: queueTimeout},
		Cluster: gateway.ClusterConfig{Name: name, LeaseTTL: 2 * time.Second}}
	cfg.Secrets.HashKey = "k"
	cfg.Secrets.RedisURL = "redis://" + rs.Addr + "/0"
	return cfg
}
