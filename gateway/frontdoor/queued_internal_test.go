package frontdoor

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/pool"
)

// fakePos is a waiting call's position, as pool.QueueWatch gives it.
type fakePos struct {
	mu  sync.Mutex
	pos func() pool.QueuePosition // nil: not waiting
}

func (f *fakePos) Position() (pool.QueuePosition, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pos == nil {
		return pool.QueuePosition{}, false
	}
	return f.pos(), true
}

func (f *fakePos) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pos = nil
}

// TestShowQueueBounded: a waiter whose place changes at every look (a
// deep queue moving fast) is looked at once per QueueUpdateInterval, and
// its stream gets only the latest estimation however many were made
// since it last wrote: no storm.
func TestShowQueueBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &FrontDoor{}
		f.cfg.Store(&Config{QueueUpdateInterval: 500 * time.Millisecond})
		s := &callerSession{f: f, wake: make(chan struct{}, 1)}
		c := &call{gatewayID: "gw1"}
		s.show(c)
		looks := 0
		qw := &fakePos{pos: func() pool.QueuePosition {
			looks++
			return pool.QueuePosition{Rank: 10000 - looks, Size: 10001 - looks, ETA: time.Second, ETAKnown: true}
		}}
		done := make(chan struct{})
		go func() {
			time.Sleep(10 * time.Second)
			close(done)
		}()
		f.showQueue(s, c, qw, done)
		if want := 21; looks > want {
			t.Errorf("looked at the queue %d times in 10 s, want at most %d (one per interval)", looks, want)
		}
		notes := s.takeQueuedNotes()
		if len(notes) != 1 {
			t.Fatalf("%d messages to write, want only the latest", len(notes))
		}
		var m struct {
			Msg     string  `json:"msg"`
			EventID string  `json:"event_id"`
			Rank    int     `json:"rank"`
			Size    int     `json:"queue_size"`
			ETA     float64 `json:"rank_eta"`
		}
		if err := json.Unmarshal(notes[0], &m); err != nil {
			t.Fatal(err)
		}
		if m.Msg != "estimation" || m.EventID != "gw1" || m.Rank != 10000-looks || m.Size != m.Rank+1 || m.ETA != 1 {
			t.Errorf("latest estimation %s, want rank %d", notes[0], 10000-looks)
		}
	})
}

// TestShowQueueOnlyChanges: a place that does not change sends nothing
// after its first estimation; a call not waiting (Left) sends nothing.
func TestShowQueueOnlyChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &FrontDoor{}
		f.cfg.Store(&Config{QueueUpdateInterval: 500 * time.Millisecond})
		s := &callerSession{f: f, wake: make(chan struct{}, 1)}
		c := &call{gatewayID: "gw2"}
		s.show(c)
		qw := &fakePos{pos: func() pool.QueuePosition { return pool.QueuePosition{Rank: 3, Size: 7} }}
		done := make(chan struct{})
		go f.showQueue(s, c, qw, done)
		synctest.Wait()
		if n := len(s.takeQueuedNotes()); n != 1 {
			t.Fatalf("%d first estimations, want 1", n)
		}
		time.Sleep(5 * time.Second)
		if n := len(s.takeQueuedNotes()); n != 0 {
			t.Errorf("%d estimations for an unchanged place", n)
		}
		qw.leave()
		time.Sleep(5 * time.Second)
		if n := len(s.takeQueuedNotes()); n != 0 {
			t.Errorf("%d estimations after the call left the queue", n)
		}
		close(done)
		synctest.Wait()
	})
}

// TestQueuedStreamHeartbeats: a stream fed only by the gateway's queue
// (its call waits for a slot) gets Gradio's heartbeat every
// HeartbeatInterval, so that proxies keep it open through a long wait.
func TestQueuedStreamHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTestDoor(t, Config{HeartbeatInterval: time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequest(http.MethodGet, "/gradio_api/queue/data?session_hash=hb1", nil).WithContext(ctx)
		s, err := f.sessionFor(ctx, "hb1", f.owner(req), "", true)
		if err != nil || s == nil {
			t.Fatalf("session: %v", err)
		}
		s.show(&call{gatewayID: "gw3", cancel: func() {}})
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			f.handleData(rec, req)
		}()
		time.Sleep(3500 * time.Millisecond)
		cancel()
		<-done
		if n := strings.Count(rec.Body.String(), `{"msg":"heartbeat"}`); n != 3 {
			t.Errorf("%d heartbeats in 3.5 s at 1 s, want 3; stream %q", n, rec.Body.String())
		}
		if s.streamDrained() != true {
			t.Error("the gone caller's queued call is still there")
		}
	})
}

// TestFrontIDsWaitsForQueuedJoins: while joins of calls that waited in the
// gateway's queue are in flight (two at once: nothing serialises them), a
// replica's message of a call the stream does not know yet waits; once
// the join that accepted it ends, the message goes out under the gateway's
// event id, which is the one its caller knows.
func TestFrontIDsWaitsForQueuedJoins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &FrontDoor{}
		f.cfg.Store(&Config{})
		s := &callerSession{f: f, calls: map[string]*call{}, wake: make(chan struct{}, 1)}
		c := &call{gatewayID: "gw1"}
		other := &call{gatewayID: "gw2"}
		s.show(c)
		s.show(other)
		end1 := s.joinCall(c)
		end2 := s.joinCall(other)
		out := make(chan []byte, 1)
		go func() { out <- s.frontIDs([]byte(`{"msg":"process_starts","event_id":"rep1"}`), "rep1") }()
		synctest.Wait()
		select {
		case b := <-out:
			t.Fatalf("written while the joins were in flight: %s", b)
		default:
		}
		s.addPending("rep1", nil, c)
		end1()
		if got, want := string(<-out), `{"msg":"process_starts","event_id":"gw1"}`; got != want {
			t.Fatalf("wrote %s, want %s", got, want)
		}
		end2()
		// A message of a call nobody joins goes out as it came.
		if got := string(s.frontIDs([]byte(`{"event_id":"other"}`), "other")); got != `{"event_id":"other"}` {
			t.Fatalf("wrote %s", got)
		}
	})
}
