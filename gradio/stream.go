package gradio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// streamLinger is how long a data stream stays open without pending calls
// before the client closes it (sse_v3 servers close it themselves right
// after the last completion; this covers cancelled calls the server never
// completes).
const streamLinger = 5 * time.Second

// maxEarly bounds messages buffered for event ids not registered yet.
const maxEarly = 1024

// ensureStreamLocked starts the stream reader when calls are pending and
// none runs. Callers hold s.mu.
func (s *appSession) ensureStreamLocked() {
	if s.streamOn || len(s.pending) == 0 {
		return
	}
	s.streamOn = s.goLocked(s.runStream)
}

// runStream keeps GET queue/data open while calls are pending: it reopens
// the stream when the server ends it (close_stream, or EOF on sse_v1/v2)
// with calls still pending, and fails them all when the transport breaks.
func (s *appSession) runStream() {
	empty := 0
	for {
		s.mu.Lock()
		pre := len(s.pending) == 0 // opened ahead of a join (see submitQueued)
		s.mu.Unlock()
		n, err := s.readStream(pre)
		s.mu.Lock()
		if s.closed || len(s.pending) == 0 {
			s.streamOn = false
			s.mu.Unlock()
			return
		}
		if err == nil && n == 0 {
			empty++
			if empty > 5 {
				err = errors.New("queue/data stream keeps ending without messages")
			}
		} else if n > 0 {
			empty = 0
		}
		if err != nil {
			// The server drops a session's queue when its stream breaks.
			s.knownQueue = false
			for _, j := range s.pending {
				s.failLocked(j, &ConnectionLostError{EventID: j.id, Accepted: true, Err: err})
			}
			s.streamOn = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if empty > 0 {
			t := time.NewTimer(time.Duration(empty) * 50 * time.Millisecond)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
			}
		}
	}
}

// streamDeadline is the latest deadline of the session's pending calls
// when it lies beyond the header time-out from now. False when none does
// (calls without a deadline extend nothing): the header time-out then
// bounds the wait for the stream's headers, so that a hung app cannot hold
// them for ever.
func (s *appSession) streamDeadline() (time.Time, bool) {
	d := s.app.set.headerTimeout
	if d <= 0 {
		return time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var latest time.Time
	for _, j := range s.pending {
		if dl, ok := j.ctx.Deadline(); ok && dl.After(latest) {
			latest = dl
		}
	}
	if latest.IsZero() || time.Until(latest) <= d {
		return time.Time{}, false
	}
	return latest, true
}

// readStream reads one queue/data response. It returns the number of
// messages read and nil at a clean end (close_stream or EOF), or the error
// that broke it.
//
// pre marks a stream opened ahead of a join: a session_not_found on it only
// means the server had forgotten the session, so it ends the stream (to be
// reopened once the join has recreated the queue) instead of failing calls.
func (s *appSession) readStream(pre bool) (int, error) {
	a := s.app
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	req, err := a.newRequest(ctx, http.MethodGet, a.api("queue/data?session_hash="+url.QueryEscape(s.hash)), nil)
	if err != nil {
		return 0, err
	}
	req.Header["Accept"] = sseAcc
	headerTimeout := true
	if deadline, ok := s.streamDeadline(); ok {
		// As a join (see join): an app short of threads answers the
		// stream late (Gradio's queue/data has a synchronous login
		// check), while its pending calls may run; its headers are
		// awaited as long as a pending call's deadline allows.
		headerTimeout = false
		late := time.AfterFunc(time.Until(deadline), cancel)
		defer late.Stop()
	}
	resp, err := a.do(req, headerTimeout)
	if err != nil {
		if s.ctx.Err() != nil {
			return 0, nil
		}
		if !headerTimeout && ctx.Err() != nil {
			err = fmt.Errorf("%w (no response headers by the latest deadline of the session's calls)", err)
		}
		return 0, fmt.Errorf("queue/data: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, &ProtocolError{Op: "queue/data", StatusCode: resp.StatusCode, Body: excerpt(b)}
	}
	var cut atomic.Bool
	s.mu.Lock()
	s.streamCut = func() { cut.Store(true); cancel() }
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.streamCut = nil
		s.mu.Unlock()
	}()
	wd := s.watchdog(cancel)
	defer wd.stop()
	r := s.eventReader(resp.Body)
	defer r.Release()
	n := 0
	for {
		ev, err := r.Next()
		wd.touch()
		if err != nil {
			if err == io.EOF {
				return n, nil
			}
			if s.ctx.Err() != nil {
				return n, nil
			}
			if cut.Load() {
				// failDropping hung up: the app forgot the session's queue.
				s.mu.Lock()
				s.knownQueue = false
				s.mu.Unlock()
				return n, nil
			}
			if wd.fired.Load() {
				// We hung up: Gradio then deletes the session's message
				// queue, so the next stream must wait for a join.
				s.mu.Lock()
				s.knownQueue = false
				s.mu.Unlock()
				if wd.idleExit.Load() {
					return n, nil
				}
				return n, fmt.Errorf("queue/data: no data for %s", a.set.streamGapTimeout)
			}
			if errors.Is(err, sse.ErrLineTooLong) || errors.Is(err, sse.ErrEventTooLarge) {
				// A replica's over-large event ends the stream's calls with a
				// protocol error, not an unbounded buffer.
				return n, &ProtocolError{Op: "queue/data", Err: err}
			}
			return n, fmt.Errorf("queue/data: %w", err)
		}
		if len(ev.Data) == 0 {
			continue
		}
		a.lastMsg.Store(time.Now().UnixNano()) // heartbeats too: the app streams
		m, err := decodeHeld(r, ev.Data)
		if err != nil {
			return n, &ProtocolError{Op: "queue/data", Body: excerpt(ev.Data), Err: err}
		}
		n++
		end, kept := s.dispatch(m, pre)
		if !kept {
			// Unless a job's result took it (a partial output, an error):
			// not counted once passed on. Only this goroutine has m now.
			m.releaseHold()
		}
		if end {
			return n, nil
		}
	}
}

// dispatch routes one message; it reports whether the stream ends, and
// whether m was kept for a job whose join has not returned yet (s.early),
// still charged to the event budget (dropEarlyLocked gives it back).
func (s *appSession) dispatch(m *message, pre bool) (end, kept bool) {
	switch m.Msg {
	case "close_stream":
		return true, false
	case "heartbeat":
		return false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.EventID == nil || *m.EventID == "" {
		if m.Msg == "unexpected_error" && m.SessionNotFound {
			s.knownQueue = false
			if pre {
				// This server forgets sessions between calls: stop opening
				// streams ahead of joins for the whole app.
				s.app.noPreopen.Store(true)
				return true, false
			}
		}
		if m.Msg == "unexpected_error" {
			err := unexpectedErr(m)
			for _, j := range s.pending {
				s.failLocked(j, &ConnectionLostError{EventID: j.id, Accepted: true, Err: err})
			}
		}
		return false, false
	}
	id := *m.EventID
	if j := s.pending[id]; j != nil {
		if m.Msg == "unexpected_error" {
			s.failLocked(j, &ConnectionLostError{EventID: id, Accepted: true, Err: unexpectedErr(m)})
			return false, false
		}
		j.handle(m)
		return false, false
	}
	if s.joining > 0 && s.nEarly < maxEarly {
		if s.early == nil {
			s.early = map[string][]*message{}
		}
		s.early[id] = append(s.early[id], m)
		s.nEarly++
		return false, true
	}
	return false, false
}

// dropEarlyLocked forgets the messages kept for joins that have not
// returned (s.early) and gives back their charge to the event budget.
// Callers hold s.mu.
func (s *appSession) dropEarlyLocked() {
	for _, msgs := range s.early {
		for _, m := range msgs {
			m.releaseHold()
		}
	}
	s.early, s.nEarly = nil, 0
}

func unexpectedErr(m *message) error {
	msg := m.Message
	if msg == "" {
		msg = "unexpected error"
	}
	if m.SessionNotFound {
		msg += " (session not found)"
	}
	return &ProtocolError{Op: "queue/data", Err: errors.New(msg)}
}

// watchdog cancels a stream that has been silent too long: the idle
// timeout while calls are pending, streamLinger when none are. It is a
// timer re-armed from its own callback, not a goroutine: a stream costs no
// parked stack for it, and touch is one atomic store per message.
type watchdog struct {
	s        *appSession
	cancel   context.CancelFunc
	idle     time.Duration // the idle timeout (0 = none while calls are pending)
	check    time.Duration // longest sleep between looks at the state
	last     atomic.Int64  // unix nanos of the last activity
	fired    atomic.Bool
	idleExit atomic.Bool // fired because nothing was pending

	mu      sync.Mutex // guards t and stopped: tick re-arms, stop disarms
	t       *time.Timer
	stopped bool
}

func (s *appSession) watchdog(cancel context.CancelFunc) *watchdog {
	w := &watchdog{s: s, cancel: cancel, idle: s.app.set.streamGapTimeout, check: streamLinger}
	if w.idle > 0 && w.idle < w.check {
		w.check = w.idle
	}
	w.touch()
	w.mu.Lock() // tick may run before t is stored
	w.t = time.AfterFunc(w.check, w.tick)
	w.mu.Unlock()
	return w
}

// tick runs when the timer expires: it cancels the stream when the gap
// since the last activity reaches the limit that applies now, or re-arms
// the timer for the rest of the gap (at most check, so that a change
// between pending and idle is noticed in time).
func (w *watchdog) tick() {
	s := w.s
	s.mu.Lock()
	none := len(s.pending) == 0 && s.joining == 0
	s.mu.Unlock()
	limit := w.idle
	if none {
		limit = streamLinger
	}
	silent := time.Duration(time.Now().UnixNano() - w.last.Load())
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if limit > 0 && silent >= limit {
		w.stopped = true
		w.idleExit.Store(none)
		w.fired.Store(true)
		w.cancel()
		return
	}
	next := w.check
	if limit > 0 && limit-silent < next {
		next = limit - silent
	}
	w.t.Reset(next)
}

func (w *watchdog) touch() { w.last.Store(time.Now().UnixNano()) }

// stop disarms the timer; once it returns, the watchdog neither fires nor
// re-arms.
func (w *watchdog) stop() {
	w.mu.Lock()
	w.stopped = true
	w.t.Stop()
	w.mu.Unlock()
}
