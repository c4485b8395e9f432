package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// sseEvent is one event of a /v1/submit stream.
type sseEvent struct {
	name string
	data map[string]any
}

// submitEvents posts /v1/submit/{api} with data and sends its events on
// the returned channel, closed at the stream's end (or a non-200 answer,
// sent as an event "status" with its code).
func submitEvents(t *testing.T, base, api string, data ...any) <-chan sseEvent {
	t.Helper()
	return submitAs(t, base, "", api, data...)
}

// nextEvent returns the next event named name, failing at the stream's
// end or after a bounded number of events or a minute.
func nextEvent(t *testing.T, ch <-chan sseEvent, name string) map[string]any {
	t.Helper()
	for range 100 {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended before event %s", name)
			}
			if e.name == name {
				return e.data
			}
			if e.name == "status" || e.name == "error" {
				t.Fatalf("got %s %v before event %s", e.name, e.data, name)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no event %s within a minute", name)
		}
	}
	t.Fatalf("no event %s in 100 events", name)
	return nil
}

// TestSubmitShowsWaiting: a /v1/submit call that waits for a slot (every
// session busy) gets its stream at once, with waiting events (rank, queue
// size, ETA from the measured calls) before accepted; one whose wait
// ends in queue_timeout gets an error event on that stream.
func TestSubmitShowsWaiting(t *testing.T) {
	gate := make(chan struct{})
	app := fdtest.SpreadApp(gate)
	srv, _, _, _, _ := frontGatewayApps(t, []*gradiotest.App{app}, func(c *gateway.Config) {
		c.Pool.MaxConnections = 1
		c.Pool.QueueTimeout = 2 * time.Second
	})
	base := srv.URL
	// A measured call: ETAs are known from then on.
	nextEvent(t, submitEvents(t, base, "upper", "x"), "complete")
	occ := submitEvents(t, base, "hold", "o")
	nextEvent(t, occ, "accepted")

	late := submitEvents(t, base, "hold", "late")
	w := nextEvent(t, late, "waiting")
	if w["rank"] != float64(0) || w["queue_size"] != float64(1) {
		t.Errorf("waiting %v, want rank 0 of 1", w)
	}
	if eta, ok := w["eta"].(float64); !ok || eta <= 0 {
		t.Errorf("waiting eta %v, want seconds", w["eta"])
	}
	e := nextEvent(t, late, "error")
	if !strings.Contains(e["error"].(map[string]any)["code"].(string), "queue") {
		t.Errorf("error %v, want a queue time-out", e)
	}

	next := submitEvents(t, base, "hold", "next")
	nextEvent(t, next, "waiting")
	close(gate)
	nextEvent(t, occ, "complete")
	nextEvent(t, next, "accepted")
	if c := nextEvent(t, next, "complete"); c["data"].([]any)[0] != "held next" {
		t.Errorf("complete %v", c)
	}
}
