package frontdoor_test

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorBusyMessageJSClient: a front-door call that waited for a
// slot until the gateway's queue_timeout reaches the official JS client
// with the gateway's own message (every replica busy, how long it waited),
// not the client's generic "This application is currently busy" that a
// 503 would show.
func TestFrontDoorBusyMessageJSClient(t *testing.T) {
	fdtest.NodeOrSkip(t) // before any replica starts
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	app := fdtest.SpreadApp(gate)
	srv, _, _, _, _ := newDoorApps(t, []*gradiotest.App{app}, func(c *config) {
		c.Pool.MaxConnections = 1
		c.Pool.QueueTimeout = 300 * time.Millisecond
	})
	hold := fdtest.FnIndex(t, srv.URL, "hold")
	// Another caller's call holds the only slot until the test ends.
	if _, err := fdtest.Join(srv.URL, "occupier", hold, "a"); err != nil {
		t.Fatal(err)
	}

	out := fdtest.NodeOutput(t, time.Minute, "drain_call.mjs", srv.URL+"/", "/hold")
	var res struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		_ = json.Unmarshal(sc.Bytes(), &res)
	}
	if res.OK || !strings.Contains(res.Error, "gradiopool: all 1 replicas are busy; waited") || strings.Contains(res.Error, "currently busy") {
		t.Fatalf("the JS client's call ended with %+v (stdout %s); want the gateway's busy message", res, out)
	}
	t.Logf("the JS client shows: %s", res.Error)
}
