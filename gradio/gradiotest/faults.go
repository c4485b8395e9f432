package gradiotest

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Knobs are the run-time behaviour and fault settings of a Server. Set them as
// fields of Server (Knobs is embedded) before Start; at run time use
// SetKnobs, UpdateKnobs or the helper methods, or POST /_sim/faults. Every zero
// value means the documented default.
type Knobs struct {
	// ConnectCost delays every answer to /config and /info (and, in sim, the
	// Hub look-up) to play a slow connect. Zero: none.
	ConnectCost time.Duration
	// ConnectJitter adds a uniformly random extra delay in [0, ConnectJitter)
	// to each ConnectCost wait (the seed saw 2-5 s: ConnectCost 2s, jitter 3s).
	ConnectJitter time.Duration
	// Latency is added to every call after process_starts, before the handler.
	Latency time.Duration
	// StepDelay is the pause between yields of the built-in count generator
	// (Call.StepDelay). Zero: DefaultStepDelay (300 ms); negative: none.
	StepDelay time.Duration
	// TimeScale multiplies the built-in sleeps (slow's seconds, StepDelay,
	// Call.Sleep) so tests can compress time. Zero: 1.
	TimeScale float64
	// HeartbeatInterval is the period of heartbeat messages on data streams
	// and of ALIVE on /heartbeat. Zero: gradio.DefaultHeartbeatInterval (15 s).
	HeartbeatInterval time.Duration
	// MaxQueueSize is the queue's max_size: joins beyond that many waiting
	// events get 503 "Queue is full". Zero: unlimited.
	MaxQueueSize int
	// DefaultConcurrencyLimit applies to endpoints whose ConcurrencyLimit is
	// zero. Zero: 1 (Gradio's default); negative: unlimited.
	DefaultConcurrencyLimit int
	// MaxFileSize is max_file_size in bytes: larger uploads get 413. Zero:
	// unlimited (config says null).
	MaxFileSize int64
	// StateTTL is how long a session's gr.State values survive after its
	// /heartbeat connection closes (Gradio: 1 h); a new heartbeat or call
	// within it keeps them. Zero: DefaultStateTTL; negative: forever.
	StateTTL time.Duration

	// FaultStatus is the status code of FailConfig and FailJoin answers.
	// Zero: 500.
	FaultStatus int
	// FailConfig makes the next N GET /config answer FaultStatus.
	FailConfig int
	// FailJoin makes the next N queue joins (and /call POSTs) answer FaultStatus.
	FailJoin int
	// CutStream breaks the data stream (connection aborted without a proper
	// end) right after each of the next N process_starts messages it carries;
	// the server then drops that session's events as Gradio does on a
	// disconnect.
	CutStream int
	// Stall makes every request (except /_sim/) hang without an answer until
	// Stall is cleared, the client gives up, or the server closes.
	Stall bool
	// SlowBody trickles every response: DefaultSlowBodyChunk bytes, then a
	// pause of SlowBody. Zero: off.
	SlowBody time.Duration
	// QueueFull makes every join answer 503 "Queue is full" as if MaxQueueSize
	// were reached.
	QueueFull bool
	// Asleep makes the replica answer 503 to everything but /_sim/, like a
	// sleeping or restarting Space. Wake() (or the Hub) clears it.
	Asleep bool
	// Hostile makes the replica misbehave as the mode says (garbage or
	// endless streams, huge answers); HostileBytes bounds how much such an
	// answer sends (zero: DefaultHostileBytes).
	Hostile      Hostile
	HostileBytes int
}

// CurrentKnobs returns the knobs in force now.
func (s *Server) CurrentKnobs() Knobs { return s.knobsNow() }

// SetKnobs replaces all knobs at run time.
func (s *Server) SetKnobs(k Knobs) { s.UpdateKnobs(func(p *Knobs) { *p = k }) }

// UpdateKnobs changes knobs at run time under the server's lock; f must not
// block.
func (s *Server) UpdateKnobs(f func(*Knobs)) {
	s.mu.Lock()
	was := s.knobs
	f(&s.knobs)
	s.knobsChangedLocked(was)
	s.mu.Unlock()
}

func (s *Server) knobsChangedLocked(was Knobs) {
	if was.Stall && !s.knobs.Stall {
		close(s.unstall)
	} else if !was.Stall && s.knobs.Stall {
		s.unstall = make(chan struct{})
	}
	if was.Asleep && !s.knobs.Asleep && s.wakeT != nil {
		s.wakeT.Stop()
		s.wakeT = nil
	}
	if !was.Asleep && s.knobs.Asleep {
		s.wakeIn = 0
	}
	for _, g := range s.groups {
		s.dispatchLocked(g)
	}
}

// FailNextConfigs makes the next n GET /config answer FaultStatus.
func (s *Server) FailNextConfigs(n int) { s.UpdateKnobs(func(k *Knobs) { k.FailConfig = n }) }

// FailNextJoins makes the next n joins answer FaultStatus.
func (s *Server) FailNextJoins(n int) { s.UpdateKnobs(func(k *Knobs) { k.FailJoin = n }) }

// CutNextStreams makes the next n data streams break mid-event.
func (s *Server) CutNextStreams(n int) { s.UpdateKnobs(func(k *Knobs) { k.CutStream = n }) }

// SetStall turns the stall fault on or off.
func (s *Server) SetStall(on bool) { s.UpdateKnobs(func(k *Knobs) { k.Stall = on }) }

// SetQueueFull turns the queue-full fault on or off.
func (s *Server) SetQueueFull(on bool) { s.UpdateKnobs(func(k *Knobs) { k.QueueFull = on }) }

// Sleep puts the replica to sleep: it answers 503 until Wake. If wakeAfter
// is positive, the first request that reaches the sleeping replica (or a Hub
// look-up of its Space) starts a timer that wakes it after wakeAfter, like a
// Space that boots when visited.
func (s *Server) Sleep(wakeAfter time.Duration) {
	s.mu.Lock()
	was := s.knobs
	s.knobs.Asleep = true
	s.knobsChangedLocked(was)
	s.wakeIn = wakeAfter
	s.mu.Unlock()
}

// Wake ends Sleep (and the Asleep knob) at once.
func (s *Server) Wake() { s.UpdateKnobs(func(k *Knobs) { k.Asleep = false }) }

// Asleep reports whether the replica is asleep.
func (s *Server) Asleep() bool { return s.knobsNow().Asleep }

// poke is a visit to a sleeping replica: it starts the wake-up timer.
func (s *Server) poke() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.knobs.Asleep || s.wakeIn <= 0 || s.wakeT != nil || s.closed {
		return
	}
	s.wakeT = time.AfterFunc(s.wakeIn, func() {
		s.mu.Lock()
		s.wakeT = nil
		was := s.knobs
		s.knobs.Asleep = false
		s.knobsChangedLocked(was)
		s.mu.Unlock()
	})
}

// Restart simulates a process restart on the same address: a new app_id,
// every session, state and queued or running event dropped (running handlers
// are cancelled), open streams told "Server stopped unexpectedly.".
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appID = newAppID()
	for _, ev := range s.events {
		ev.kill()
		ev.q.stopped = true
		ev.q.signal()
		if ev.status == statusQueued {
			ev.group.remove(ev)
		}
	}
	s.events = map[string]*event{}
	for _, sess := range s.sessions {
		sess.stopped = true
		sess.signal()
	}
	s.sessions = map[string]*simSession{}
	s.callSess = map[string]string{}
}

// ResetFaults restores the knobs given at Start and zeroes the execution
// counters.
func (s *Server) ResetFaults() {
	s.mu.Lock()
	was := s.knobs
	s.knobs = s.start
	s.knobsChangedLocked(was)
	s.mu.Unlock()
	s.execs.reset()
	s.reqs.reset()
}

func (s *Server) knobsNow() Knobs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.knobs
}

// takeFault decrements a fault counter and reports whether it fired.
func (s *Server) takeFault(f func(*Knobs) *int) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := f(&s.knobs)
	if *p <= 0 {
		return false, 0
	}
	*p--
	st := s.knobs.FaultStatus
	if st == 0 {
		st = DefaultFaultStatus
	}
	return true, st
}

// slowWriter trickles a response body.
type slowWriter struct {
	http.ResponseWriter
	delay time.Duration
	ctx   context.Context
	done  <-chan struct{}
}

func (sw *slowWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := min(len(b), DefaultSlowBodyChunk)
		m, err := sw.ResponseWriter.Write(b[:c])
		n += m
		if err != nil {
			return n, err
		}
		b = b[c:]
		if f, ok := sw.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		t := time.NewTimer(sw.delay)
		select {
		case <-t.C:
		case <-sw.ctx.Done():
			t.Stop()
			return n, sw.ctx.Err()
		case <-sw.done:
			t.Stop()
			return n, errors.New("gradiotest: server closed")
		}
	}
	return n, nil
}

func (sw *slowWriter) Flush() {
	if f, ok := sw.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
