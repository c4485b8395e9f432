package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// The gateway's queue across a cluster: one slot for the whole cluster
// (max_connections 1), taken by a slow call; a second caller's join
// reaches gateway A and its queue/data stream gateway B (a plain load
// balancer). A answers the join at once with its own event id, and B's
// stream shows the call's place, then the replica's messages under that
// id, or the gateway's message when the wait ends without a replica.

// clusterQueue opens a simulator and two gateways sharing a Redis with one
// slot between them.
func clusterQueue(t *testing.T, name string, queueTimeout time.Duration) (*gradiotest.Server, []string, []*gateway.Gateway) {
	t.Helper()
	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	urls, gws := openGateways(t, clusterConfig(t, name, []string{sim.URL}, 1, queueTimeout), 2)
	return sim, urls, gws
}

// occupy takes the cluster's one slot at gateway A with a call of the
// slow endpoint (seconds), whose stream is read at A until it ends. It
// returns once the call runs at sim: a join may be answered while its
// call still waits for the slot, and a join after it would then queue
// behind it.
func occupy(t *testing.T, sim *gradiotest.Server, base string, seconds string) <-chan string {
	t.Helper()
	fdtest.JoinAt(t, base, "occupier0", `"data":[`+seconds+`],"fn_index":2`)
	done := make(chan string, 1)
	go func() {
		resp, err := http.Get(base + "/gradio_api/queue/data?session_hash=occupier0")
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	fdtest.WaitFor(t, "the occupying call to run", func() bool { return sim.Snapshot().Running == 1 })
	return done
}

// anyMsg returns the next message of ch, failing after 10 s or at the
// stream's end.
func anyMsg(t *testing.T, ch <-chan map[string]any) map[string]any {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended early")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message on the stream within 10 s")
	}
	return nil
}

func TestFrontDoorQueueAcrossGateways(t *testing.T) {
	sim, urls, gws := clusterQueue(t, "fdqueue", 10*time.Second)
	occupied := occupy(t, sim, urls[0], "1.5")
	before := gws[0].FrontDoor().Stats().Queued
	id := fdtest.JoinAt(t, urls[0], "waiter0", `"data":["abc"],"fn_index":0`)
	if q := gws[0].FrontDoor().Stats().Queued; q != before+1 {
		t.Fatalf("gateway A answered the waiting join with %s but counts %d queued joins, want %d (answered at once)", id, q, before+1)
	}
	msgs := fdtest.Messages(t, urls[1], "waiter0")
	m := anyMsg(t, msgs)
	if m["msg"] != "estimation" || m["event_id"] != id || m["rank"] != float64(0) {
		t.Fatalf("gateway B's first message = %v, want the estimation of %s at rank 0", m, id)
	}
	var seen []string
	for m["msg"] != "close_stream" {
		m = anyMsg(t, msgs)
		seen = append(seen, m["msg"].(string))
		if m["msg"] == "close_stream" {
			break
		}
		if m["event_id"] != id {
			t.Fatalf("gateway B relayed %v, not under the caller's event id %s", m, id)
		}
		if m["msg"] == "process_completed" {
			out, _ := json.Marshal(m["output"])
			if m["success"] != true || !strings.Contains(string(out), `"ABC"`) {
				t.Fatalf("completion on gateway B: %v", m)
			}
		}
	}
	if !strings.Contains(strings.Join(seen, " "), "process_completed") {
		t.Fatalf("gateway B's stream had no completion: %v", seen)
	}
	if b := <-occupied; !strings.Contains(b, `"success":true`) {
		t.Fatalf("the occupying call:\n%s", b)
	}
	if n := sim.Executions("upper"); n != 1 {
		t.Fatalf("upper ran %d times, want 1", n)
	}
	waitInFlight(t, gws[0], 0)
}

// TestFrontDoorQueueTimeoutAcrossGateways: the wait at gateway A ends in
// its queue time-out; the caller's stream at B gets process_completed
// with success false and the gateway's message.
func TestFrontDoorQueueTimeoutAcrossGateways(t *testing.T) {
	sim, urls, gws := clusterQueue(t, "fdqtimeout", 300*time.Millisecond)
	occupied := occupy(t, sim, urls[0], "2")
	id := fdtest.JoinAt(t, urls[0], "waiter1", `"data":["abc"],"fn_index":0`)
	msgs := fdtest.Messages(t, urls[1], "waiter1")
	var last map[string]any
	for m := anyMsg(t, msgs); m["msg"] != "close_stream"; m = anyMsg(t, msgs) {
		if m["event_id"] != id {
			t.Fatalf("gateway B wrote %v, not of the caller's call %s", m, id)
		}
		last = m
	}
	out, _ := json.Marshal(last["output"])
	if last["msg"] != "process_completed" || last["success"] != false || !strings.Contains(string(out), "gradiopool") {
		t.Fatalf("gateway B's last message = %v, want process_completed with success false and the gateway's message", last)
	}
	<-occupied
	if n := sim.Executions("upper"); n != 0 {
		t.Fatalf("upper ran %d times after the wait timed out", n)
	}
	waitInFlight(t, gws[0], 0)
}

// TestFrontDoorQueueCancelAcrossGateways: the caller cancels its waiting
// call at gateway B; A ends the wait, the call never runs, and B's stream
// gets the call's end.
func TestFrontDoorQueueCancelAcrossGateways(t *testing.T) {
	sim, urls, gws := clusterQueue(t, "fdqcancel", 10*time.Second)
	occupied := occupy(t, sim, urls[0], "1.5")
	id := fdtest.JoinAt(t, urls[0], "waiter2", `"data":["abc"],"fn_index":0`)
	msgs := fdtest.Messages(t, urls[1], "waiter2")
	if m := anyMsg(t, msgs); m["msg"] != "estimation" || m["event_id"] != id {
		t.Fatalf("gateway B's first message = %v, want the estimation of %s", m, id)
	}
	resp, err := http.Post(urls[1]+"/gradio_api/cancel", "application/json",
		strings.NewReader(`{"event_id":"`+id+`","session_hash":"waiter2","fn_index":0}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var last map[string]any
	for m := anyMsg(t, msgs); m["msg"] != "close_stream"; m = anyMsg(t, msgs) {
		last = m
	}
	if last["msg"] != "process_completed" || last["event_id"] != id || last["success"] != false {
		t.Fatalf("gateway B's last message = %v, want the cancelled call's end", last)
	}
	if q := gws[0].FrontDoor().Stats(); q.InFlight > 1 {
		t.Fatalf("gateway A: %+v", q)
	}
	<-occupied
	if n := sim.Executions("upper"); n != 0 {
		t.Fatalf("upper ran %d times after its cancel", n)
	}
	waitInFlight(t, gws[0], 0)
}

func waitInFlight(t *testing.T, g *gateway.Gateway, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.FrontDoor().Stats().InFlight != want {
		if time.Now().After(deadline) {
			t.Fatalf("gateway still holds slots: %+v", g.FrontDoor().Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFrontDoorQueueAcrossGatewaysSameSession: the slow call holding the
// slot and the call waiting for it are of ONE session, joined at A, read
// at B: B relays the replica's stream of the session for the first while
// the second is joined at A, and the second's messages, on that same
// stream, reach the caller under A's event id (B waits for the note that
// names the replica's id before it relays a message of a call it does not
// know).
func TestFrontDoorQueueAcrossGatewaysSameSession(t *testing.T) {
	sim, urls, gws := clusterQueue(t, "fdqsame", 10*time.Second)
	first := fdtest.JoinAt(t, urls[0], "samesess0", `"data":[1],"fn_index":2`)
	second := fdtest.JoinAt(t, urls[0], "samesess0", `"data":["abc"],"fn_index":0`)
	msgs := fdtest.Messages(t, urls[1], "samesess0")
	done := map[string]bool{}
	for m := anyMsg(t, msgs); m["msg"] != "close_stream"; m = anyMsg(t, msgs) {
		id, _ := m["event_id"].(string)
		if id != first && id != second {
			t.Fatalf("gateway B relayed %v, of no call the caller knows (%s, %s)", m, first, second)
		}
		if m["msg"] == "process_completed" {
			if m["success"] != true {
				t.Fatalf("completion: %v", m)
			}
			done[id] = true
		}
	}
	if !done[first] || !done[second] {
		t.Fatalf("completions on gateway B: %v", done)
	}
	if n := sim.Executions("upper"); n != 1 {
		t.Fatalf("upper ran %d times, want 1", n)
	}
	waitInFlight(t, gws[0], 0)
}

// roundRobin is a plain load balancer in front of the gateways: each
// request goes to the next one, so a client's config, join and stream
// land on different gateways.
func roundRobin(t *testing.T, urls []string) string {
	t.Helper()
	var proxies []*httputil.ReverseProxy
	for _, u := range urls {
		target, _ := url.Parse(u)
		p := httputil.NewSingleHostReverseProxy(target)
		p.FlushInterval = -1
		proxies = append(proxies, p)
	}
	var next atomic.Uint64
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As a balancer must: a gateway may answer before the transport
		// has made its last read of the caller's body. Without full
		// duplex net/http's server closes the body as the answer's header
		// is written, that last read fails, and the transport closes the
		// connection the answer's body is arriving on (Go issue 40747;
		// the JS client saw a join's answer cut, "TypeError: terminated",
		// in about 2 of 100 runs of TestFrontDoorConcurrentCallsNeverHang).
		_ = http.NewResponseController(w).EnableFullDuplex()
		proxies[next.Add(1)%uint64(len(proxies))].ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		lb.CloseClientConnections()
		lb.Close()
	})
	return lb.URL
}

// TestFrontDoorQueueJSClientAcrossGateways: the official JS client, behind
// a round-robin load balancer over two gateways of a cluster, shows the
// gateway's queue while its call waits for the cluster's one slot (stage
// pending, position, size, ETA) and the gateway's own message when the
// wait ends in queue_timeout.
func TestFrontDoorQueueJSClientAcrossGateways(t *testing.T) {
	fdtest.NodeOrSkip(t) // before any replica starts
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	sim := gradiotest.NewServer(fdtest.SpreadApp(gate))
	t.Cleanup(sim.Close)
	cfg := clusterConfig(t, "fdqjs", []string{sim.URL}, 1, 2*time.Second)
	urls, _ := openGateways(t, cfg, 2)
	lb := roundRobin(t, urls)
	// A measured call at each gateway: ETAs are known from then on.
	for i, u := range urls {
		// A session of its own at each gateway (one named after the
		// port's last digits was shared by two gateways whose ports end
		// alike, and forwarded to the first: the second measured nothing).
		if got := fdtest.Call(t, u, "warm"+strconv.Itoa(i), fdtest.FnIndex(t, u, "measured"), "x"); got != "X" {
			t.Fatalf("measured at %s: %q", u, got)
		}
	}
	// Through the balancer, its join and its stream at different gateways.
	if got := fdtest.Call(t, lb, "warmlb", fdtest.FnIndex(t, lb, "measured"), "y"); got != "Y" {
		t.Fatalf("measured through the balancer: %q", got)
	}
	if _, err := fdtest.Join(lb, "occupier", fdtest.FnIndex(t, lb, "hold"), "o"); err != nil {
		t.Fatal(err)
	}
	out := fdtest.NodeOutput(t, time.Minute, "queue_status.mjs", lb+"/", "/hold", "js")
	fdtest.CheckJSQueueStatus(t, out)
}

// TestFrontDoorJSConformanceAcrossGateways runs the official JS client's
// conformance suite through a round-robin load balancer over two or three
// gateways of a cluster, over relayed (Gradio 5) and bridged (Gradio 4.0-
// 4.21, 3.x) replicas: each of the client's requests (config, join,
// stream, cancel, upload) lands on another gateway than the one before.
// Every check must pass (view_api but over bridged replicas, whose /info
// has no Python names: see fdtest.BridgedMode): the requests of a session are
// forwarded to the gateway that owns it, and an upload taken by one
// gateway is fetched by the owner of the join that names it.
func TestFrontDoorJSConformanceAcrossGateways(t *testing.T) {
	fdtest.NodeOrSkip(t)
	for _, tc := range []struct {
		mode     gradiotest.Mode
		gateways int
	}{{gradiotest.Gradio5, 3}, {gradiotest.Gradio4SSEv2, 2}, {gradiotest.Gradio3WS, 2}} {
		t.Run(fmt.Sprintf("%s/%d", tc.mode, tc.gateways), func(t *testing.T) {
			sim := gradiotest.NewUnstartedServer(nil)
			sim.Mode = tc.mode
			sim.Start()
			t.Cleanup(sim.Close)
			cfg := clusterConfig(t, "fdjs", []string{sim.URL}, 4, 10*time.Second)
			urls, _ := openGateways(t, cfg, tc.gateways)
			checks := fdtest.RunNode(t, "conformance.mjs", roundRobin(t, urls)+"/")
			if len(checks) < 20 {
				t.Fatalf("only %d checks ran", len(checks))
			}
			for _, c := range checks {
				if !c.OK && !(c.Name == "view_api" && fdtest.BridgedMode(tc.mode)) {
					t.Errorf("%s failed through %d gateways: %s", c.Name, tc.gateways, c.Detail)
				}
			}
		})
	}
}

// TestFrontDoorAppIDAcrossGateways: the gateways of a cluster present one
// app_id (the JS client's reconnect() would otherwise report the app
// changed when it lands on another gateway), and another cluster another.
func TestFrontDoorAppIDAcrossGateways(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	appID := func(base string) string {
		resp, err := http.Get(base + "/gradio_api/app_id")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var ids []string
	for _, name := range []string{"appa", "appb"} {
		urls, _ := openGateways(t, clusterConfig(t, name, []string{sim.URL}, 4, 0), 2)
		a, b := appID(urls[0]), appID(urls[1])
		if a != b || !strings.Contains(a, `"app_id":`) {
			t.Fatalf("cluster %s: app_id %s at one gateway, %s at the other", name, a, b)
		}
		ids = append(ids, a)
	}
	if ids[0] == ids[1] {
		t.Fatalf("two clusters present one app_id %s", ids[0])
	}
}

// TestFrontDoorCancelAtAnotherGateway: the JS client opens its heartbeat at
// connect, which may make the session at a gateway before its first join
// binds it at another; a cancel reaching the first gateway must still
// stop the call (it learns the binding and the call's ids from Redis),
// and the caller's stream, at the second, gets the call's end.
func TestFrontDoorCancelAtAnotherGateway(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	cfg := clusterConfig(t, "fdcancel", []string{sim.URL}, 4, 10*time.Second)
	urls, _ := openGateways(t, cfg, 2)
	for i, session := range []string{"cancelhere0", "cancelhere1"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, urls[0]+"/gradio_api/heartbeat/"+session, nil)
		hb, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		id := fdtest.JoinAt(t, urls[1], session, `"data":[8],"fn_index":2`)
		msgs := fdtest.Messages(t, urls[1], session)
		for m := anyMsg(t, msgs); m["msg"] != "process_starts"; m = anyMsg(t, msgs) {
		}
		resp, err := http.Post(urls[0]+"/gradio_api/cancel", "application/json",
			strings.NewReader(`{"event_id":"`+id+`","session_hash":"`+session+`","fn_index":2}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		m := anyMsg(t, msgs)
		if out, _ := json.Marshal(m["output"]); m["msg"] != "process_completed" || m["event_id"] != id || strings.Contains(string(out), "slept") {
			t.Fatalf("session %d: after the cancel at the other gateway the stream carried %v, want the cancelled call's end", i, m)
		}
		cancel()
		hb.Body.Close()
	}
}

// TestFrontDoorFirstBindAcrossGateways: the first two joins of a new
// session, to a gr.State endpoint, reach two gateways at once; the
// session must end up on one replica and one session there (the binding
// is settled in Redis), so its state counts both calls and the next.
func TestFrontDoorFirstBindAcrossGateways(t *testing.T) {
	var replicas []string
	for range 2 {
		sim := gradiotest.NewServer(nil)
		t.Cleanup(sim.Close)
		replicas = append(replicas, sim.URL)
	}
	cfg := clusterConfig(t, "fdbind", replicas, 8, 10*time.Second)
	urls, _ := openGateways(t, cfg, 2)
	fn := fdtest.FnIndex(t, urls[0], "counter")
	for i := range 10 {
		session := "firstbind" + strconv.Itoa(i)
		start := make(chan struct{})
		errs := make(chan error, 2)
		for g, item := range []string{"a", "b"} {
			go func() {
				<-start
				_, err := fdtest.Join(urls[g], session, fn, item, nil)
				errs <- err
			}()
		}
		close(start)
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		msgs := fdtest.Messages(t, urls[0], session)
		for m := anyMsg(t, msgs); m["msg"] != "close_stream"; m = anyMsg(t, msgs) {
		}
		id, err := fdtest.Join(urls[1], session, fn, "c", nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs = fdtest.Messages(t, urls[1], session)
		m := anyMsg(t, msgs)
		for ; m["msg"] != "process_completed" || m["event_id"] != id; m = anyMsg(t, msgs) {
		}
		if out, _ := json.Marshal(m["output"]); !strings.Contains(string(out), `"3 items`) {
			t.Fatalf("session %d: its third call saw %s: the first two ran in two sessions", i, out)
		}
	}
}

// TestFrontDoorCallsInMetricsAcrossGateways: calls joined at gateway A and
// read at gateway B are counted once in gradiopool_calls_total, with how
// they ended (B saw the end, A holds the call: B tells A both).
func TestFrontDoorCallsInMetricsAcrossGateways(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	cfg := clusterConfig(t, "fdmetrics", []string{sim.URL}, 4, 10*time.Second)
	urls, gws := openGateways(t, cfg, 2)
	for i, body := range []string{`"data":["hi"],"fn_index":0`, `"data":["x"],"fn_index":4`, `"data":["ho"],"fn_index":0`} {
		session := "metrics" + strconv.Itoa(i)
		id := fdtest.JoinAt(t, urls[0], session, body)
		msgs := fdtest.Messages(t, urls[1], session)
		for m := anyMsg(t, msgs); m["msg"] != "process_completed" || m["event_id"] != id; m = anyMsg(t, msgs) {
		}
	}
	waitInFlight(t, gws[0], 0)
	replica := strings.TrimPrefix(sim.URL, "http://")
	want := strings.ReplaceAll(`
# HELP gradiopool_calls_total Ended calls by door (route: v1, call, frontdoor), replica (none: failed before any) and result (ok, app_error, error).
# TYPE gradiopool_calls_total counter
gradiopool_calls_total{replica="R",result="app_error",route="frontdoor"} 1
gradiopool_calls_total{replica="R",result="ok",route="frontdoor"} 2
`, `"R"`, `"`+replica+`"`)
	if err := testutil.GatherAndCompare(gws[0].Metrics().Registry(), strings.NewReader(want), "gradiopool_calls_total"); err != nil {
		t.Errorf("gateway A (holds the calls): %v", err)
	}
	if n := testutil.CollectAndCount(gws[1].Metrics().Registry(), "gradiopool_calls_total"); n != 0 {
		t.Errorf("gateway B (read the calls) counts %d series of them too", n)
	}
}
