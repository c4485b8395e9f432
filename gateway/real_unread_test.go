package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

const (
	envRealRelayed = "GRADIOPOOL_REAL_RELAYED"
	envRealBridged = "GRADIOPOOL_REAL_BRIDGED"
)

// TestRealUnreadJoinsNeverRun is TestFrontDoorUnreadJoinsNeverRun on REAL
// Gradio servers, one at a time: those named in GRADIOPOOL_REAL_RELAYED
// (sse_v3: 4.44, 5.x, 6.x; the front door relays them) and in
// GRADIOPOOL_REAL_BRIDGED (3.50 ws, 4.8 sse, 4.16 sse_v1, 4.20 sse_v2; the
// front door bridges them with the Go client), comma-separated URLs of the
// reference app (testdata/realgradio/app.py). A slow call holds the app's
// one running place; three joins nobody reads follow, one holding the
// gateway's second slot (queued at the replica), two waiting in the
// gateway's queue. After read_grace nothing the gateway gave up may still
// be queued at the replica (docs/notes-queued-takeback.md says per release
// what takes a queued call back):
//
//   - from Gradio 4.8 on, where a call taken back leaves the app's queue at
//     once, a probe call made straight at the replica (Go client) is told
//     it is first in line (rank 0);
//   - on Gradio 3.x (ws), whose queue keeps a call whose WebSocket closed
//     until its turn or the next estimation broadcast (it then never runs:
//     its data is asked for at its turn), the witness is gr.State: the
//     joins nobody reads are counter("gone") calls of their own sessions,
//     queued behind the slow call in Gradio 3's one queue; once the grace
//     is over each session reads its stream and calls counter("after"),
//     queued after its given-up call. Its answer says "1 items: after"
//     unless the given-up call ran first.
//
// Skipped without the variables.
func TestRealUnreadJoinsNeverRun(t *testing.T) {
	var urls []string
	for _, env := range []string{envRealRelayed, envRealBridged} {
		for _, u := range strings.Split(os.Getenv(env), ",") {
			if u = strings.TrimSpace(u); u != "" {
				urls = append(urls, u)
			}
		}
	}
	if len(urls) == 0 {
		t.Skip(envRealRelayed + " and " + envRealBridged + " are not set (comma-separated URLs of real Gradio apps: sse_v3; older)")
	}
	for _, u := range urls {
		t.Run(strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://"), func(t *testing.T) {
			proto := realProtocol(t, u)
			srv, _, _ := frontGatewayOver(t, []string{u}, func(c *gateway.Config) {
				c.Pool.MaxConnections = 2
				c.Pool.QueueTimeout = time.Minute
			})
			slow := strconv.Itoa(fdtest.FnIndex(t, srv.URL, "slow"))
			fdtest.JoinAt(t, srv.URL, "realocc", `"data":[15],"fn_index":`+slow)
			occ := fdtest.Messages(t, srv.URL, "realocc")
			fdtest.WaitMsg(t, occ, "process_starts")
			if proto == "ws" {
				unreadStateWitness(t, srv.URL, u)
				return
			}
			for i := range 3 {
				fdtest.JoinAt(t, srv.URL, "realunread"+strconv.Itoa(i), `"data":[1],"fn_index":`+slow)
			}
			time.Sleep(fdtest.ReadGrace + 2*time.Second)
			rank := probeRank(t, u)
			if rank != 0 {
				t.Fatalf("%s (%s): a call joined straight at the replica after the grace is at rank %d: calls the gateway gave up are still queued there", u, proto, rank)
			}
			t.Logf("%s (%s): a probe after the grace is first in line (rank 0)", u, proto)
		})
	}
}

// unreadStateWitness is the Gradio 3 (ws) half of
// TestRealUnreadJoinsNeverRun: see there.
func unreadStateWitness(t *testing.T, base, u string) {
	counter := strconv.Itoa(fdtest.FnIndex(t, base, "counter"))
	for i := range 3 {
		fdtest.JoinAt(t, base, "realunread"+strconv.Itoa(i), `"data":["gone",null],"fn_index":`+counter)
	}
	time.Sleep(fdtest.ReadGrace + 2*time.Second)
	for i := range 3 {
		s := "realunread" + strconv.Itoa(i)
		fdtest.JoinAt(t, base, s, `"data":["after",null],"fn_index":`+counter)
		got := ""
		// A stream may first end with the given-up call's own (cancelled)
		// completion, which has no data: the next one carries the answer.
		for try := 0; try < 3 && got == ""; try++ {
			for m := range fdtest.Messages(t, base, s) {
				if m["msg"] != "process_completed" {
					continue
				}
				out, _ := json.Marshal(m["output"])
				var o struct {
					Data []any `json:"data"`
				}
				_ = json.Unmarshal(out, &o)
				if len(o.Data) > 0 {
					got, _ = o.Data[0].(string)
					break
				}
			}
		}
		if got != "1 items: after" {
			t.Errorf("%s: session %d's call after the grace answered %q, want \"1 items: after\": the call the gateway gave up ran first", u, i, got)
			continue
		}
		t.Logf("%s (ws): session %d's call after the grace answered %q: its given-up call never ran", u, i, got)
	}
}

// realProtocol is the protocol of the real app u as the Go client names
// it (sse_v3, sse_v2, sse_v1, sse or ws).
func realProtocol(t *testing.T, u string) string {
	t.Helper()
	c, err := gradio.Connect(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.Config().Protocol
}

// probeRank submits slow(0) straight at the real app u with the Go client
// (any protocol) in a session of its own and returns the rank of its first
// queue estimation (-1: it started before any was seen). The probe is
// cancelled then; on releases that cannot take a queued call back it runs
// later, for no time.
func probeRank(t *testing.T, u string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := gradio.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	j, err := c.Submit(ctx, "/slow", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Cancel(context.Background()) }()
	for ev := range j.Events() {
		switch ev.Kind {
		case gradio.EventQueued:
			if ev.Rank >= 0 {
				return ev.Rank
			}
		case gradio.EventStarted:
			return -1
		case gradio.EventCompleted, gradio.EventError:
			t.Fatalf("the probe ended before it was queued or started: %v", ev.Err)
		}
	}
	t.Fatal("the probe's events ended: no queue estimation, no start")
	return -1
}
