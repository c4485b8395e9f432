package gradio

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/internal/diff"
	"github.com/gradiopool/gradiopool/internal/sse"
)

// EventKind says what an Event reports.
type EventKind int

// Event kinds, in the order a job normally produces them.
const (
	// EventQueued: waiting in the app's queue (Rank, QueueSize, ETA).
	// Sent again when the position changes.
	EventQueued EventKind = iota + 1
	// EventStarted: a worker picked the job up (ETA = the function's
	// average run time, when known).
	EventStarted
	// EventProgress: gr.Progress update (Progress).
	EventProgress
	// EventLog: gr.Info / gr.Warning / gr.Success (Log, Level, Title).
	EventLog
	// EventOutput: a partial output of a generator (Data, diffs applied).
	EventOutput
	// EventCompleted: the final outputs (Data). Always the last event of a
	// successful job.
	EventCompleted
	// EventError: the job failed (Err); always the last event of a failed,
	// cancelled or lost job.
	EventError
)

func (k EventKind) String() string {
	switch k {
	case EventQueued:
		return "queued"
	case EventStarted:
		return "started"
	case EventProgress:
		return "progress"
	case EventLog:
		return "log"
	case EventOutput:
		return "output"
	case EventCompleted:
		return "completed"
	case EventError:
		return "error"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// MarshalText makes kinds readable in JSON and logs.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Event is one update of a Job.
type Event struct {
	Kind EventKind
	// Queued: 0-based position and queue length; -1 when unknown.
	Rank, QueueSize int
	// Queued: estimated time until start; Started: average run time.
	// 0 when unknown.
	ETA time.Duration
	// Progress: one entry per active gr.Progress / tqdm bar.
	Progress []Progress
	// Log: the message, level ("info", "warning", "success", "error") and
	// title.
	Log, Level, Title string
	// Output / Completed: one value per output, State (and other skip_api)
	// outputs dropped as the Python client does.
	Data []json.RawMessage
	// Error: the job's error (see Job.Wait).
	Err error

	hold *sse.Hold // an output's charge while it waits for its reader (emitOutput)
}

// Progress is one gr.Progress unit.
type Progress struct {
	Index    *int     `json:"index"`
	Length   *int     `json:"length"`
	Unit     string   `json:"unit"`
	Progress *float64 `json:"progress"`
	Desc     string   `json:"desc"`
}

// Job is one submitted call. Its methods are safe for concurrent use.
type Job struct {
	s        *appSession
	dep      *Dependency
	endpoint string
	ctx      context.Context // the Submit ctx: governs the job

	mu       sync.Mutex // guards the fields below
	id       string
	events   eventQueue // not yet taken by the Events pump
	notify   chan struct{}
	evCh     <-chan Event // what Events returned
	pumping  bool
	done     chan struct{} // closed when finished
	result   []json.RawMessage
	err      error
	finished bool
	last     []any // full values of the last generator output (diffs apply to it)
	gotFirst bool
	stopCtx  func() bool // unregisters the ctx watcher
	quiet    bool        // Predict: nobody will ask for Events; keep none
	// noOutputs: keep no outputs history (SubmitOptions.NoOutputs).
	noOutputs bool
	status    Event               // the latest event
	outputs   [][]json.RawMessage // partial and final outputs (not for quiet jobs)
	v0key     string              // key in s.pending for v0 jobs (set before publication)
	onFinish  func(err error)     // releases a job's own stream or socket (set before publication)
	after     []*afterDone        // AfterDone callbacks not run yet
	hook      EventHook           // SubmitOptions.Hook; nil if none
	started   bool                // the app sent process_starts
	hold      *sse.Hold           // the result's charge to its party's event budget (keep)
	released  bool                // Release was called: a result kept later is not charged
}

// afterDone is one AfterDone registration (a pointer, so stop finds it).
type afterDone struct{ f func() }

func newJob(s *appSession, ctx context.Context, dep *Dependency, endpoint string, jo jobOpts) *Job {
	return &Job{s: s, ctx: ctx, dep: dep, endpoint: endpoint, done: make(chan struct{}), hook: jo.hook, quiet: jo.quiet, noOutputs: jo.noOutputs}
}

// ID returns the event id the app assigned (empty for a v0 app until the
// job leaves the queue).
func (j *Job) ID() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.id
}

// Status returns the job's latest event (zero Kind before the first).
func (j *Job) Status() Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.status
}

// Outputs returns every output the job produced so far: each partial
// output of a generator, then the final one (as the Python client's
// job.outputs()). Jobs started by Predict keep none.
func (j *Job) Outputs() [][]json.RawMessage {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([][]json.RawMessage(nil), j.outputs...)
}

// Done is closed when the job has finished.
func (j *Job) Done() <-chan struct{} { return j.done }

// Wait waits for the job to finish and returns its outputs (State outputs
// dropped), or its error: *AppError (the function raised), ErrCanceled,
// the Submit ctx's error, ErrClosed, *ConnectionLostError, *ProtocolError.
// A ctx given to Wait only bounds the wait; it does not cancel the job.
//
// A result larger than 64 KiB counts against its call's party in the
// EventBudget from its arrival until Release: when the budget needs its
// room for a party within its share while this one is over its own, the
// room is taken back, and Wait then fails as if its stream had been cut
// (*ConnectionLostError wrapping ErrEventShare, or ErrEventTooLarge).
func (j *Job) Wait(ctx context.Context) ([]json.RawMessage, error) {
	select {
	case <-j.done:
	case <-ctx.Done():
		select {
		case <-j.done: // both: the job's own outcome says more than the wait's end
		default:
			return nil, ctx.Err()
		}
	}
	if j.err == nil {
		if err := j.heldErr(); err != nil {
			return nil, &ConnectionLostError{EventID: j.ID(), Accepted: true, Err: &ProtocolError{Op: "queue/data", Err: err}}
		}
	}
	return j.result, j.err
}

// Release gives back what the job's result holds of the EventBudget (an
// output larger than 64 KiB is charged to its call's party from its
// arrival until then): call it once the result is delivered (written to
// whoever asked for it), or once its caller gives up on it (a result
// that comes after Release is not charged). The result stays valid.
// Predict releases its own; a Job dropped without Release gives it back
// when collected.
func (j *Job) Release() {
	j.mu.Lock()
	h := j.hold
	j.hold, j.released = nil, true
	j.mu.Unlock()
	h.Release()
}

// keep makes h (the event the result was decoded from) the result's
// charge to the event budget, until Release. Callers hold s.mu, before
// the job finishes.
func (j *Job) keep(h *sse.Hold) {
	if h == nil {
		return
	}
	j.mu.Lock()
	old := j.hold
	j.hold = h
	if j.released { // its caller gave up before the result came (its ctx ended)
		old, j.hold = h, nil
	}
	j.mu.Unlock()
	old.Release()
}

// heldErr is why the result's room in the event budget was taken back,
// nil while it is counted (or was released).
func (j *Job) heldErr() error {
	j.mu.Lock()
	h := j.hold
	j.mu.Unlock()
	return h.Err()
}

// Events returns the job's updates; the channel is closed after the final
// event (EventCompleted or EventError). Events wait for their reader, so
// a slow reader never stalls other jobs, up to 4096 events or 16 MiB
// behind (past that the job fails with ErrSlowReader); past 64 KiB behind
// they count in the EventBudget, charged to the job's party, until read
// (refused room, the job fails with ErrSlowReader too). Stop reading only
// after the channel closes or once the Submit ctx has ended (after that,
// each remaining event, including the final EventError, waits at most a
// second for a reader), or the delivering goroutine stays behind until
// Close. Every call returns the same channel.
func (j *Job) Events() <-chan Event {
	j.mu.Lock()
	if j.evCh != nil {
		ch := j.evCh
		j.mu.Unlock()
		return ch // the same channel on every call
	}
	ch := make(chan Event)
	j.evCh = ch
	j.pumping = true
	j.notify = make(chan struct{}, 1)
	j.mu.Unlock()
	j.s.mu.Lock()
	started := j.s.goLocked(func() { j.pump(ch) })
	j.s.mu.Unlock()
	if !started {
		// Closed session: the job has finished; hand over what is left.
		j.mu.Lock()
		evs := released(j.events.take())
		j.mu.Unlock()
		buf := make(chan Event, len(evs))
		for _, ev := range evs {
			buf <- ev
		}
		close(buf)
		j.mu.Lock()
		j.evCh = buf
		j.mu.Unlock()
		return buf
	}
	return ch
}

func (j *Job) pump(ch chan<- Event) {
	defer close(ch)
	defer func() { // left behind by a delivery that ended early: nobody takes them
		j.mu.Lock()
		released(j.events.evs)
		j.mu.Unlock()
	}()
	grace := false // the Submit ctx ended: deliver what is left, but do not wait long
	// closed ends the delivery when the session closes, unless the job had
	// finished by then: its events are all here, and a reader still
	// reading them (a gateway relaying a stream whose session the pool
	// closed at the job's end) gets them, each within eventGrace.
	closed := j.s.ctx.Done()
	for {
		j.mu.Lock()
		evs, finished := j.events.take(), j.finished
		j.mu.Unlock()
		for i, ev := range evs {
			// An output stays charged to its party until its reader has it.
			h := ev.hold
			ev.hold = nil
			ok := j.send(ch, ev, &grace, &closed)
			h.Release()
			if !ok {
				released(evs[i+1:])
				return
			}
		}
		if finished {
			// finish queued the final event in the same critical section
			// that set finished, so it was in evs.
			return
		}
		select {
		case <-j.notify:
		case <-j.done:
		case <-closed:
			if !j.isFinished() {
				return
			}
			grace, closed = true, nil
		}
	}
}

// send hands ev to the Events reader, waiting at most eventGrace once the
// Submit ctx has ended (grace) or the finished job's session has closed;
// false: nobody takes it, the delivery ends.
func (j *Job) send(ch chan<- Event, ev Event, grace *bool, closed *<-chan struct{}) bool {
	if *grace {
		return sendGrace(ch, ev, *closed)
	}
	select {
	case ch <- ev:
		return true
	case <-j.ctx.Done():
		*grace = true
		return sendGrace(ch, ev, *closed)
	case <-*closed:
		if !j.isFinished() {
			return false
		}
		*grace, *closed = true, nil
		return sendGrace(ch, ev, nil)
	}
}

func (j *Job) isFinished() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.finished
}

// eventGrace is how long an event waits for a reader once the job's ctx has
// ended (the reader may have gone).
const eventGrace = time.Second

func sendGrace(ch chan<- Event, ev Event, closed <-chan struct{}) bool {
	t := time.NewTimer(eventGrace)
	defer t.Stop()
	select {
	case ch <- ev:
		return true
	case <-t.C:
		return false
	case <-closed:
		return false
	}
}

// emit queues an event for the Events reader. Callers hold j.mu.
func (j *Job) emitLocked(ev Event) {
	j.status = ev
	if ev.Kind == EventStarted {
		j.started = true
	}
	if j.hook != nil {
		j.hook(ev)
	}
	if j.quiet {
		return
	}
	if (ev.Kind == EventOutput || ev.Kind == EventCompleted) && !j.noOutputs {
		j.outputs = append(j.outputs, ev.Data)
	}
	j.events.push(ev, j.pumping)
	if j.notify != nil {
		select {
		case j.notify <- struct{}{}:
		default:
		}
	}
}

// failIfOverrun fails j, and cancels it at the app, once its Events
// reader has fallen too far behind (eventQueue). Callers hold s.mu.
func (j *Job) failIfOverrun() {
	j.mu.Lock()
	err := j.events.overrun
	j.mu.Unlock()
	if err != nil {
		j.s.abortLocked(j, err)
	}
}

// maxUnreadEvents bounds the events kept for a job whose Events were never
// asked for (Predict): the final result is kept separately.
const maxUnreadEvents = 256

// maxBacklogEvents and maxBacklogBytes bound how far a job's Events reader
// may fall behind the app (see eventQueue).
const maxBacklogEvents, maxBacklogBytes = 4096, 16 << 20

// eventQueue is a job's events not yet taken by its Events pump. Before
// anyone asked for them the oldest are dropped past maxUnreadEvents
// (Events may still be called; the final event is always kept). Once a
// reader takes them, one that falls more than maxBacklogEvents or
// maxBacklogBytes behind, or whose backlog is refused room in the event
// budget (Job.emitOutput), overruns the queue: its events are dropped and
// the job fails (ErrSlowReader, see Job.handle). The app's stream is not
// slowed for a slow reader (other calls may share it, and its rate floor
// would blame the app), so they would otherwise pile up without bound.
type eventQueue struct {
	evs     []Event
	bytes   int
	overrun error // why the reader fell too far behind; nil: it did not
}

func (q *eventQueue) push(ev Event, pumping bool) {
	final := ev.Kind == EventError || ev.Kind == EventCompleted
	if q.overrun != nil && !final {
		ev.hold.Release()
		return
	}
	switch {
	case final:
	case !pumping && len(q.evs) >= maxUnreadEvents:
		q.bytes -= q.evs[0].size()
		q.evs = q.evs[1:]
	case pumping && (len(q.evs) >= maxBacklogEvents || q.bytes+ev.size() > maxBacklogBytes):
		ev.hold.Release()
		q.overrunBy(ErrSlowReader)
		return
	}
	q.evs = append(q.evs, ev)
	q.bytes += ev.size()
}

// overrunBy drops the queued events (and their holds): the job fails with
// err at its next message (Job.failIfOverrun).
func (q *eventQueue) overrunBy(err error) {
	released(q.evs)
	q.evs, q.bytes, q.overrun = nil, 0, err
}

// take returns the queued events and empties the queue; whoever takes
// them releases their holds (released) once they are handed over.
func (q *eventQueue) take() []Event {
	evs := q.evs
	q.evs, q.bytes = nil, 0
	return evs
}

// released gives back what evs hold of the event budget, and returns them.
func released(evs []Event) []Event {
	for i := range evs {
		evs[i].hold.Release()
		evs[i].hold = nil
	}
	return evs
}

// size is about what ev holds in memory.
func (ev Event) size() int {
	n := 64 + len(ev.Log) + len(ev.Title)
	for _, d := range ev.Data {
		n += len(d)
	}
	return n
}

// finish ends the job once. Callers must not hold j.mu.
func (j *Job) finish(result []json.RawMessage, err error) bool {
	j.mu.Lock()
	if j.finished {
		j.mu.Unlock()
		return false
	}
	j.finished = true
	j.result, j.err = result, err
	if err != nil {
		j.emitLocked(Event{Kind: EventError, Err: err})
	} else {
		j.emitLocked(Event{Kind: EventCompleted, Data: result})
	}
	j.last = nil
	stop := j.stopCtx
	after := j.after
	j.after = nil
	j.mu.Unlock()
	close(j.done)
	if stop != nil {
		stop()
	}
	if j.onFinish != nil {
		j.onFinish(err)
	}
	for _, a := range after {
		// Own goroutines: finish may run under the session's lock, and
		// callbacks may call back into the client (release, close).
		go a.f()
	}
	return true
}

// AfterDone arranges for f to run in its own goroutine once the job has
// finished (Done is closed and Wait returns at once), like
// context.AfterFunc does for a context: nothing waits in between, so a
// caller that must act when the job ends needs no goroutine parked per job.
// If the job has already finished, f starts at once.
//
// stop unregisters f; it reports whether it did so before f was started
// (false if the job had finished or stop was called before).
func (j *Job) AfterDone(f func()) (stop func() bool) {
	a := &afterDone{f: f}
	j.mu.Lock()
	if j.finished {
		j.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	j.after = append(j.after, a)
	j.mu.Unlock()
	return func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		for i, b := range j.after {
			if b == a {
				j.after = append(j.after[:i], j.after[i+1:]...)
				return true
			}
		}
		return false
	}
}

// watch aborts the job (with /cancel) when ctx ends before it finishes.
func (j *Job) watch(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { j.s.abort(j, ctx.Err()) })
	j.mu.Lock()
	fin := j.finished
	if !fin {
		j.stopCtx = stop
	}
	j.mu.Unlock()
	if fin {
		stop()
	}
}

// Cancel asks the app to cancel the job (POST {prefix}/cancel, Gradio
// 4.29+) and ends the job with ErrCanceled. ctx bounds the request. A job
// that is its session's only call and has not started (or runs on an app
// without /cancel, sse_v1/v2) is dropped instead by hanging up the
// session's stream: Gradio keeps a cancelled queued event in its queue and
// runs it later, but drops a session's events when its stream goes away.
func (j *Job) Cancel(ctx context.Context) error {
	failed, dropped := j.s.failDropping(j, ErrCanceled)
	if !failed {
		return nil // already finished
	}
	if dropped {
		// Dropped from the app's queue; a /cancel follows in case the app
		// had started it just before.
		j.s.mu.Lock()
		j.s.cancelAfterHangUpLocked(j)
		j.s.mu.Unlock()
		return nil
	}
	return j.s.sendCancel(ctx, j)
}

// handle applies one message for this job. Callers hold s.mu (so messages
// of one job are applied in stream order).
func (j *Job) handle(m *message) {
	defer j.failIfOverrun()
	cfg := j.s.app.cfg
	switch m.Msg {
	case "estimation":
		ev := Event{Kind: EventQueued, Rank: -1, QueueSize: -1}
		if m.Rank != nil {
			ev.Rank = *m.Rank
		}
		if m.QueueSize != nil {
			ev.QueueSize = *m.QueueSize
		}
		ev.ETA = seconds(m.RankETA)
		j.emit(ev)
	case "process_starts":
		j.emit(Event{Kind: EventStarted, ETA: seconds(m.ETA)})
	case "progress":
		j.emit(Event{Kind: EventProgress, Progress: m.ProgressData})
	case "log":
		ev := Event{Kind: EventLog, Log: m.Log, Level: m.Level}
		if m.Title != nil {
			ev.Title = *m.Title
		}
		j.emit(ev)
	case "process_generating", "process_streaming":
		out, err := m.Output.parsed()
		if err != nil {
			j.s.failLocked(j, &ProtocolError{Op: "queue/data", Err: err})
			return
		}
		if out.isError() {
			j.s.failLocked(j, j.s.appErr(out, m.Title))
			return
		}
		data, err := j.applyGenerating(out.Data, m.Msg == "process_generating" && diffProtocol(cfg.Protocol))
		if err != nil {
			j.s.failLocked(j, &ProtocolError{Op: "queue/data", Err: err})
			return
		}
		j.emitOutput(Event{Kind: EventOutput, Data: j.s.dropState(j.dep, data)}, m)
	case "process_completed":
		out, err := m.Output.parsed()
		if err != nil {
			j.s.failLocked(j, &ProtocolError{Op: "queue/data", Err: err})
			return
		}
		if out.isError() || (m.Success != nil && !*m.Success) {
			j.s.failLocked(j, j.s.appErr(out, m.Title))
			return
		}
		if out.Data == nil {
			// {} : the synthetic completion after /cancel.
			j.s.failLocked(j, ErrCanceled)
			return
		}
		// Merge before the job finishes: a caller that calls a rendered
		// endpoint right after Predict returns must find it.
		j.s.applyRenderLocked(out.RenderConfig)
		j.keep(m.hold)
		m.hold = nil
		j.s.completeLocked(j, j.s.dropState(j.dep, out.Data))
	}
}

func (j *Job) emit(ev Event) {
	j.mu.Lock()
	if !j.finished {
		j.emitLocked(ev)
	}
	j.mu.Unlock()
}

// emitOutput queues a generator's output for the Events reader. Past the
// queue's allowance (the stream's, 64 KiB) it is charged to m's stream's
// party until the reader takes it: a reader that falls behind counts
// against its caller's fair share of the event budget; refused room, it
// overruns the queue (ErrSlowReader), as the event of a stream is
// refused. The output takes the place of m's own charge: a diff's full
// value may be larger than the diff, and m's bytes are no longer held.
func (j *Job) emitOutput(ev Event, m *message) {
	m.releaseHold()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return
	}
	if j.pumping && !j.quiet && m.src != nil && j.events.bytes+ev.size() > sse.DefaultAllowance {
		h, err := m.src.Charge(ev.size())
		if err != nil {
			// The reader's fault, not the app's: not wrapped as
			// ErrEventTooLarge, which would count against the replica.
			j.events.overrunBy(fmt.Errorf("%w: no room in the event budget for its backlog: %v", ErrSlowReader, err))
			return
		}
		ev.hold = h
	}
	j.emitLocked(ev)
}

// applyGenerating turns a process_generating data array into full values:
// the first one of a run is full, later ones (sse_v2+) are edit lists.
func (j *Job) applyGenerating(data []json.RawMessage, diffs bool) ([]json.RawMessage, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !diffs {
		return data, nil
	}
	if !j.gotFirst {
		j.gotFirst = true
		j.last = make([]any, len(data))
		for i, raw := range data {
			v, err := decodeAny(raw)
			if err != nil {
				return nil, err
			}
			j.last[i] = v
		}
		return data, nil
	}
	out := make([]json.RawMessage, len(data))
	for i, raw := range data {
		edits, err := diff.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("output %d: not an edit list: %w", i, err)
		}
		for len(j.last) <= i {
			j.last = append(j.last, nil) // new output (hot reload): from null
		}
		v, err := diff.Apply(j.last[i], edits)
		if err != nil {
			return nil, fmt.Errorf("output %d: %w", i, err)
		}
		j.last[i] = v
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func diffProtocol(p string) bool {
	return p == protocolSSEv2 || p == protocolSSEv21 || p == protocolSSEv3
}

func seconds(f *float64) time.Duration {
	if f == nil || *f < 0 {
		return 0
	}
	return time.Duration(*f * float64(time.Second))
}
