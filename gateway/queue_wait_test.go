package gateway_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// submitAs is submitEvents for a signed-in user (the user header; ""
// anonymous).
func submitAs(t *testing.T, base, user, api string, data ...any) <-chan sseEvent {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"data": data})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/submit/"+api, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.Header.Set(gateway.UserHeader, user)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			out <- sseEvent{name: "status", data: map[string]any{"code": resp.StatusCode}}
			return
		}
		sc := bufio.NewScanner(resp.Body)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			if n, ok := strings.CutPrefix(line, "event: "); ok {
				name = n
			} else if d, ok := strings.CutPrefix(line, "data: "); ok {
				var m map[string]any
				_ = json.Unmarshal([]byte(d), &m)
				out <- sseEvent{name: name, data: m}
			}
		}
	}()
	t.Cleanup(func() {
		for range out {
		}
	})
	return out
}

// TestSubmitShowsWaitingForOwnSession: with sticky sessions, a signed-in
// user's /v1/submit call that waits for the user's own session (their
// previous call still runs in it; the replica has free slots) gets
// waiting events with its place among the user's waiting calls, then
// runs once the session is free.
func TestSubmitShowsWaitingForOwnSession(t *testing.T) {
	gate := make(chan struct{})
	app := fdtest.SpreadApp(gate)
	srv, _, _, _, _ := frontGatewayApps(t, []*gradiotest.App{app}, func(c *gateway.Config) {
		c.Pool.MaxConnections = 4
		c.Pool.StickySessions = true
	})
	base := srv.URL
	const user = "ann@example.org"
	first := submitAs(t, base, user, "hold", "first")
	nextEvent(t, first, "accepted")
	second := submitAs(t, base, user, "hold", "second")
	w := nextEvent(t, second, "waiting")
	if w["rank"] != float64(0) || w["queue_size"] != float64(1) {
		t.Errorf("waiting %v, want rank 0 of 1 (the user's own session is busy)", w)
	}
	third := submitAs(t, base, user, "hold", "third")
	if w := nextEvent(t, third, "waiting"); w["rank"] != float64(1) || w["queue_size"] != float64(2) {
		t.Errorf("third call waiting %v, want rank 1 of 2", w)
	}
	close(gate)
	for _, ch := range []<-chan sseEvent{first, second, third} {
		nextEvent(t, ch, "complete")
	}
}
