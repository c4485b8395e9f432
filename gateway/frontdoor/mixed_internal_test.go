package frontdoor

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
)

// TestStreamStaysOpenWhileAJoinIsHandled: a session with no call in
// flight is drained (its stream may close) unless one of its joins is
// being handled; the join's end wakes the stream to look again.
func TestStreamStaysOpenWhileAJoinIsHandled(t *testing.T) {
	s := &callerSession{calls: map[string]*call{}, wake: make(chan struct{}, 1)}
	if !s.streamDrained() {
		t.Fatal("an idle session is not drained")
	}
	done := s.handlingJoin()
	if s.streamDrained() {
		t.Error("drained while a join is handled: its close_stream could overtake the join's answer")
	}
	done()
	if !s.streamDrained() {
		t.Error("not drained after the join ended")
	}
	select {
	case <-s.wake:
	default:
		t.Error("the join's end did not wake the stream")
	}
}

// TestStreamDrainedCountsBridgedWork: relayed calls in flight and the
// bridge's running calls or unwritten messages keep the stream open; a
// bridged call whose end was written does not.
func TestStreamDrainedCountsBridgedWork(t *testing.T) {
	s := &callerSession{calls: map[string]*call{}, wake: make(chan struct{}, 1)}
	br := s.bridgeOf(true)
	br.mu.Lock()
	br.jobs["b1"] = &bridgeJob{cancel: func() {}}
	br.mu.Unlock()
	s.calls["b1"] = &call{via: bridge{}}
	if s.streamDrained() {
		t.Error("drained with a bridged call running")
	}
	br.mu.Lock()
	delete(br.jobs, "b1")
	br.push([]byte(`{"msg":"process_completed","event_id":"b1"}`))
	br.mu.Unlock()
	if s.streamDrained() {
		t.Error("drained with the bridged call's completion unwritten")
	}
	if msgs := s.bridgeMessages(); len(msgs) != 1 {
		t.Fatalf("bridge messages %q, want the completion", msgs)
	}
	if !s.streamDrained() {
		t.Error("not drained once the bridged call's end was written (its slot is the bridge's to free)")
	}
	s.calls["r1"] = &call{replica: "a", via: relay{}}
	if s.streamDrained() {
		t.Error("drained with a relayed call in flight")
	}
}

// TestCloseIfDrainedOrdersJoins: a stream closes only when no join of its
// session is being handled, and a join that starts once it closes is
// answered only after the caller let go of that stream (a join answered
// between the two would reach the official client before close_stream:
// its call would never be read).
func TestCloseIfDrainedOrdersJoins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &FrontDoor{ctx: context.Background(), log: slog.New(slog.DiscardHandler)}
		s := &callerSession{f: f, calls: map[string]*call{}, wake: make(chan struct{}, 1)}
		done := s.handlingJoin()
		if s.closeIfDrained() {
			t.Fatal("the stream closed while a join was handled")
		}
		done()
		if !s.closeIfDrained() {
			t.Fatal("a drained session's stream did not close")
		}
		answered := make(chan struct{})
		go func() {
			defer s.handlingJoin()()
			s.awaitClosed(context.Background())
			close(answered)
		}()
		letGo, cancel := context.WithCancel(context.Background())
		go s.closed(letGo)
		synctest.Wait()
		select {
		case <-answered:
			t.Fatal("a join was answered while the stream it would have used was closing")
		default:
		}
		cancel() // the caller lets go of the stream
		synctest.Wait()
		select {
		case <-answered:
		default:
			t.Fatal("the join was not answered after the caller let go of the stream")
		}
	})
}
