package frontdoor

import (
	"testing"

	"github.com/gradiopool/gradiopool/pool"
)

// TestStreamStaysOpenWhileAJoinIsHandled: a session with no call in
// flight is drained (its stream may close) unless one of its joins is
// being handled; the join's end wakes the stream to look again.
func TestStreamStaysOpenWhileAJoinIsHandled(t *testing.T) {
	s := &callerSession{pending: map[string]*pool.Slot{}, wake: make(chan struct{}, 1)}
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
	s := &callerSession{pending: map[string]*pool.Slot{}, calls: map[string]callMeta{}, wake: make(chan struct{}, 1)}
	br := s.bridgeOf(true)
	br.mu.Lock()
	br.jobs["b1"] = &bridgeJob{cancel: func() {}}
	br.mu.Unlock()
	s.pending["b1"], s.calls["b1"] = nil, callMeta{bridged: true}
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
	s.pending["r1"], s.calls["r1"] = nil, callMeta{replica: "a"}
	if s.streamDrained() {
		t.Error("drained with a relayed call in flight")
	}
}
