package gradio

import (
	"context"
	"time"
)

// Cancelling a job that is still waiting in the app's queue.
//
// Real Gradio 4.x and 5.x (checked on 4.44.1 and 5.49.1; 6.x fixed it)
// answer POST /cancel for a queued event with {"success": true} and a
// synthetic process_completed, but leave the event in the queue: it starts later and
// runs to the end, holding the endpoint's concurrency slot (one call at a
// time by default) while nobody waits for it. What does remove it is the
// session's data stream going away while the event is pending: Gradio then
// drops every queued event of that session (Queue.clean_events, checked
// every 50 ms). So when a job that has not started is cancelled and it is
// the session's only call, the client hangs up the session's stream before
// it sends /cancel. A queued job cancelled while other calls of its session
// are in flight still runs later on such apps (as with the official
// clients).

// cutGrace is how long a session waits after hanging up its stream before
// its next queue/join: Gradio notices the hang-up within 50 ms and then
// drops the session's queued events, so a join sent sooner could be
// dropped with them.
const cutGrace = 250 * time.Millisecond

// failDropping ends j with err like fail and, when j is queued and alone
// in its session, hangs up the session's data stream first so that the
// app drops the queued event. dropped reports the hang-up: the caller then
// sends no /cancel, which could only race with it (the app answers a
// /cancel with a synthetic completion, and a stream that delivers it ends
// normally, keeping the event queued).
func (s *appSession) failDropping(j *Job, err error) (failed, dropped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dropped = s.dropQueuedLocked(j)
	return s.failLocked(j, err), dropped
}

// dropQueuedLocked hangs up the session's data stream when that removes j
// from the app's queue (see dropsQueuedLocked) and reports whether it did.
// Callers hold s.mu and end j right after.
func (s *appSession) dropQueuedLocked(j *Job) bool {
	if s.streamCut == nil || !s.dropsQueuedLocked(j) {
		return false
	}
	s.streamCut()
	s.cutAt = time.Now()
	return true
}

// dropsQueuedLocked reports whether hanging up the stream removes j from
// the app's queue without losing any other call. Callers hold s.mu.
func (s *appSession) dropsQueuedLocked(j *Job) bool {
	if !hangUpDropsQueued(s.app.cfg) {
		return false
	}
	if s.pending[j.key()] != j || len(s.pending) != 1 || s.joining != 0 {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	// Before Gradio 4.29 there is no /cancel: hanging up is also the only
	// way to stop a running job (its task dies with the session's stream).
	return !j.started || !hasCancelRoute(s.app.cfg)
}

// hangUpDropsQueued reports whether the app drops a session's queued
// events soon after its data stream goes away, as measured on real servers:
// Gradio 4.16 (sse_v1) and 4.29-5.x (sse_v3) notice within 50 ms. Gradio
// 6 needs no hang-up: its /cancel removes a queued event (remove_from_queue,
// 6.25.0), and it notices a hang-up only at its next 10 s poll, which could
// also drop the session's next call. Gradio 4.20 (sse_v2) never drops them
// (its clean-up runs after a yield that fails on the closed stream); ws
// (3.x) and sse v0 (4.0-4.8) calls have their own connection, whose
// closing leaves the event queued too.
func hangUpDropsQueued(cfg *Config) bool {
	switch cfg.Protocol {
	case protocolSSEv1:
		return true
	case protocolSSEv3:
		return !versionAtLeast(cfg.Version, "6.0")
	}
	return false
}

// hasCancelRoute reports whether the app has POST {prefix}/cancel.
func hasCancelRoute(cfg *Config) bool {
	return cfg.Protocol == protocolSSEv3 && versionAtLeast(cfg.Version, "4.29")
}

// waitCutGrace delays a join that follows a hang-up by dropQueued (see
// cutGrace).
func (s *appSession) waitCutGrace(ctx context.Context) error {
	s.mu.Lock()
	at := s.cutAt
	s.mu.Unlock()
	left := cutGrace - time.Since(at)
	if at.IsZero() || left <= 0 {
		return nil
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cancelAfterHangUpLocked follows a hang-up by dropQueuedLocked with a
// /cancel once the app has had time to drop the session's queued events
// (cutGrace). A job that the app had started just before — the client had
// not seen process_starts yet, and a hang-up does not stop a running job —
// is stopped by it; a dropped one is unknown to the app by then, so the
// cancel is harmless. Apps without the cancel route get none. Close waits
// for it. Callers hold s.mu.
func (s *appSession) cancelAfterHangUpLocked(j *Job) {
	if !hasCancelRoute(s.app.cfg) {
		return
	}
	run := func() {
		time.Sleep(cutGrace)
		// Gradio cancels by session and fn_index, not by event: a later
		// call in this session, queued or running by the time the cancel
		// lands, could be killed instead. So the cancel is skipped when
		// one exists, and joins wait while it is in flight. Skipping
		// risks only that the dropped job, if it had started, runs to its
		// end unobserved (never twice).
		s.mu.Lock()
		if s.joining > 0 || len(s.pending) > 0 {
			s.mu.Unlock()
			return
		}
		gate := make(chan struct{})
		s.cancelling = gate
		s.mu.Unlock()
		s.sendCancelBounded(j)
		s.mu.Lock()
		s.cancelling = nil
		s.mu.Unlock()
		close(gate)
	}
	if !s.goLocked(run) {
		go run()
	}
}

// waitCancelling delays a join while the /cancel sent after a hang-up is in
// flight (see cancelAfterHangUpLocked).
func (s *appSession) waitCancelling(ctx context.Context) error {
	s.mu.Lock()
	gate := s.cancelling
	s.mu.Unlock()
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
