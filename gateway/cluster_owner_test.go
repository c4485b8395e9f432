package gateway_test

import (
	"context"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// openGatewayBehindProxy opens a gateway of cfg that the other gateways
// reach through a toxiproxy link (its advertised address), so that a test
// can kill (Stop) or freeze (a timeout toxic) it as the cluster sees it.
// It returns the link's URL, which callers may use too.
func openGatewayBehindProxy(t *testing.T, cfg gateway.Config) (*toxiproxy.Proxy, string, *gateway.Gateway) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	toxi := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	link := toxiproxy.NewProxy(toxi, t.Name(), "127.0.0.1:0", ln.Addr().String())
	if err := link.Start(); err != nil {
		t.Fatal(err)
	}
	cfg.Cluster.AdvertiseURL = "http://" + link.Listen
	g, err := gateway.Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(g)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() {
		link.Stop()
		srv.CloseClientConnections()
		srv.Close()
		_ = g.Close(context.Background())
	})
	return link, "http://" + link.Listen, g
}

// TestFrontDoorOwnerLost: gateway A owns a session whose call runs and
// whose stream a caller reads through gateway B (forwarded to A); B owns
// a session of its own with a call running. A is killed (its connections
// cut, new ones refused) or frozen (it accepts and never answers). The
// caller at B gets Gradio's unexpected_error within a few seconds, not a
// stream left open; the next join of that session binds it at B and runs;
// B's own call and slots are untouched; and the call A held is never run
// again.
func TestFrontDoorOwnerLost(t *testing.T) {
	for _, fault := range []string{"killed", "frozen"} {
		t.Run(fault, func(t *testing.T) {
			gate := make(chan struct{})
			open := sync.OnceFunc(func() { close(gate) })
			t.Cleanup(open)
			sim := gradiotest.NewUnstartedServer(spreadApp(gate))
			sim.DefaultConcurrencyLimit = 4 // both held calls run at once
			sim.Start()
			t.Cleanup(sim.Close)
			cfg := clusterConfig(t, "fdlost"+fault, []string{sim.URL}, 4, 5*time.Second)
			link, aURL, _ := openGatewayBehindProxy(t, cfg)
			bURLs, bs := openGateways(t, cfg, 1)
			b := bURLs[0]
			hold, upper := fnIndexOf(t, b, "hold"), fnIndexOf(t, b, "upper")

			joinAt(t, aURL, "ownedbya", `"data":["a"],"fn_index":`+strconv.Itoa(hold)) // A binds it: A owns it
			atA := fdMessages(t, b, "ownedbya")                                        // forwarded to A
			waitMsg(t, atA, "process_starts")
			idB := joinAt(t, b, "ownedbyb", `"data":["b"],"fn_index":`+strconv.Itoa(hold))
			atB := fdMessages(t, b, "ownedbyb")
			waitMsg(t, atB, "process_starts")

			switch fault {
			case "killed":
				link.Stop()
			case "frozen":
				for _, dir := range []string{"downstream", "upstream"} {
					if _, err := link.Toxics.AddToxicJson(strings.NewReader(`{"name":"freeze-` + dir + `","type":"timeout","stream":"` + dir + `","attributes":{"timeout":0}}`)); err != nil {
						t.Fatal(err)
					}
				}
			}
			lost := waitMsg(t, atA, "unexpected_error")
			if msg, _ := lost["message"].(string); !strings.Contains(msg, "stopped answering") {
				t.Fatalf("the lost owner's stream ended with %v", lost)
			}
			if m, ok := <-atA; ok {
				t.Fatalf("the stream went on after the lost owner's error: %v", m)
			}

			open() // the held calls finish
			if done := waitMsg(t, atB, "process_completed"); done["event_id"] != idB || done["success"] != true {
				t.Fatalf("B's own call: %v", done)
			}
			// The session A owned binds anew at B.
			if got := fdCall(t, b, "ownedbya", upper, "z"); got != "Z" {
				t.Fatalf("the lost owner's session at B: %q", got)
			}
			waitInFlight(t, bs[0], 0)
			if n := sim.Executions("hold"); n > 2 {
				t.Fatalf("hold ran %d times: the call the lost owner held was run again", n)
			}
		})
	}
}

// waitMsg returns the first message of ch whose msg is want, failing
// after 10 s or at the stream's end.
func waitMsg(t *testing.T, ch <-chan map[string]any, want string) map[string]any {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before %s", want)
			}
			if m["msg"] == want {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s on the stream within 10 s", want)
		}
	}
}
