package gradio

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"
)

// appSession is one session hash: its pending calls and the single queue/data
// stream that carries all of their messages.
type appSession struct {
	app    *app
	hash   string
	ctx    context.Context // ends at Close: streams, heartbeat, pumps
	cancel context.CancelFunc
	wg     sync.WaitGroup // goroutines of this session; Add only under mu with !closed

	mu       sync.Mutex // guards the fields below; no network I/O under it
	pending  map[string]*Job
	early    map[string][]*message // messages for ids whose join has not returned
	nEarly   int
	joining  int  // queue/join requests in flight
	streamOn bool // a runStream goroutine exists
	hbOn     bool // the heartbeat goroutine exists
	// knownQueue: the server holds a message queue for this session (a
	// join succeeded and no session_not_found since), so an sse_v3 stream
	// may be opened before the next join returns.
	knownQueue bool
	closed     bool
	v0seq      int
	party      string // SetEventParty's; "": the session is its own party
	// streamCut ends the current queue/data request on purpose (see
	// failDropping); nil when no stream is open.
	streamCut func()
	cutAt     time.Time // when streamCut was last used
	// cancelling is closed when the /cancel sent after a hang-up
	// (cancelAfterHangUpLocked) has been answered; nil when none is in
	// flight. Joins wait for it: that cancel would kill them.
	cancelling chan struct{}

	// rendered is the app's config with what gr.render functions created
	// in this session merged in (render.go); nil until the first one.
	rendered atomic.Pointer[Config]
}

func newSession(a *app) *appSession {
	ctx, cancel := context.WithCancel(context.Background())
	a.refs.Add(1)
	return &appSession{app: a, hash: newSessionHash(), ctx: ctx, cancel: cancel, pending: map[string]*Job{}}
}

// goLocked starts f as a tracked goroutine unless the session is closed.
// Callers hold s.mu.
func (s *appSession) goLocked(f func()) bool {
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

func (s *appSession) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	jobs := make([]*Job, 0, len(s.pending))
	for _, j := range s.pending {
		jobs = append(jobs, j)
		// The app would keep running a job nobody waits for any more.
		s.goLocked(func() { s.sendCancelBounded(j) })
	}
	s.closed = true
	s.pending = map[string]*Job{}
	s.dropEarlyLocked()
	s.mu.Unlock()
	for _, j := range jobs {
		j.finish(nil, ErrClosed)
	}
	// The streams end now; the cancels above and those started by abort
	// have a context of their own, and are waited for.
	s.cancel()
	s.wg.Wait()
	if s.app.refs.Add(-1) == 0 && s.app.own != nil {
		s.app.own.CloseIdleConnections()
	}
}

// Predict calls endpoint and waits for its final outputs. See Submit for
// endpoint and args; State (and other skip_api) outputs are dropped, as
// the Python client does, and each output is the raw JSON value.
func (c *Client) Predict(ctx context.Context, endpoint string, args ...any) ([]json.RawMessage, error) {
	j, err := c.sess.submit(ctx, endpoint, args, jobOpts{quiet: true})
	if err != nil {
		return nil, err
	}
	defer j.Release() // the result is the caller's from here
	return j.Wait(ctx)
}

// Submit starts a call and returns once the app accepted it (queue/join
// returned an event id; for a v0 app, once the queue answered), or with an
// error, which means the app did NOT accept the call (nothing to cancel).
//
// endpoint is an api_name with or without leading "/" ("upper", "/upper")
// or FnIndex(i). args are the endpoint's parameters in order, without its
// State inputs (sent as null for the server to fill from the session);
// trailing parameters with defaults may be omitted, and a final Kwargs
// passes parameters by name (both use /info, fetched once). Arguments are
// JSON-encoded; Upload values (File, FileReader, FileURL), at any depth of
// []any / map[string]any, are uploaded and replaced by FileData.
//
// ctx governs the whole job: when it ends before completion the client
// POSTs /cancel (detached, bounded by the cancel timeout) and the job ends
// with ctx's error. The queue/join request itself runs detached from ctx,
// bounded by the header timeout, so that a call the app accepted is never
// left running uncancelled.
func (c *Client) Submit(ctx context.Context, endpoint string, args ...any) (*Job, error) {
	return c.sess.submit(ctx, endpoint, args, jobOpts{})
}

// SubmitOptions are the per-call options of [Client.SubmitWith]; the zero
// value is Submit's behaviour.
type SubmitOptions struct {
	// Hook, if set, is called with each of the job's events, in order, the
	// final EventCompleted or EventError included.
	Hook EventHook
	// NoOutputs: the job keeps no history of its outputs for
	// [Job.Outputs], which then returns none. For a caller that takes the
	// outputs from Events or Wait: a generator's every partial output
	// would otherwise stay live as long as the job (a long streaming call
	// holds all it has streamed).
	NoOutputs bool
	// Quiet: nobody reads the job's Events (it is waited for, as Predict
	// does): the job keeps neither events nor outputs; Hook still sees
	// each event.
	Quiet bool
}

// SubmitWith is Submit with per-call options. They are a parameter rather
// than context values so that they reach this job only, not other calls
// made with the same context.
func (c *Client) SubmitWith(ctx context.Context, opts SubmitOptions, endpoint string, args ...any) (*Job, error) {
	return c.sess.submit(ctx, endpoint, args, jobOpts{hook: opts.Hook, quiet: opts.Quiet, noOutputs: opts.NoOutputs})
}

// jobOpts are a job's options on their way from Submit to newJob.
type jobOpts struct {
	quiet     bool      // Predict, SubmitOptions.Quiet: keep no event history
	noOutputs bool      // SubmitOptions.NoOutputs
	hook      EventHook // SubmitOptions.Hook
}

// submit starts a call; quiet jobs (Predict) keep no event history.
func (s *appSession) submit(ctx context.Context, endpoint string, args []any, jo jobOpts) (*Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := s.config()
	dep, err := cfg.Endpoint(endpoint)
	if err != nil {
		return nil, err
	}
	data, info, err := s.buildArgs(ctx, cfg, dep, endpoint, args)
	if err != nil {
		return nil, err
	}
	var oauth *string
	if tok := s.app.set.oauthToken; tok != "" && info != nil && info.OAuthToken != "" {
		t := tok.reveal()
		oauth = &t
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if s.app.callTransport() {
		return s.submitCall(ctx, dep, endpoint, data, jo)
	}
	switch cfg.Protocol {
	case protocolSSE:
		return s.submitV0(ctx, dep, endpoint, data, oauth, jo)
	case protocolWS:
		return s.submitWS(ctx, dep, endpoint, data, jo)
	}
	j, err := s.submitQueued(ctx, dep, endpoint, data, oauth, jo)
	if err != nil && queueUnreachable(err) && callCapable(cfg, dep) {
		// The queue route is missing (a proxy that forwards only /call):
		// the call was never accepted, so it may go through /call.
		s.app.log.Info("gradio: queue/join unreachable, using /call", "base", s.app.base, "err", err)
		s.app.useCall.Store(true)
		return s.submitCall(ctx, dep, endpoint, data, jo)
	}
	return j, err
}

func needsInfo(cfg *Config, d *Dependency, args []any) bool {
	if n := len(args); n > 0 {
		if _, ok := args[n-1].(Kwargs); ok {
			return true
		}
	}
	np := 0
	for _, id := range d.Inputs {
		if !cfg.IsState(id) {
			np++
		}
	}
	return len(args) < np
}

var (
	jsonCT  = []string{"application/json"}
	apiUser = []string{"api"}
	sseAcc  = []string{"text/event-stream"}
)

// abort ends j because its ctx ended, and cancels it on the server. The
// job ends and its cancel starts under one lock, so that a Close either
// still finds the job pending (and cancels it itself) or waits for this
// cancel.
func (s *appSession) abort(j *Job, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abortLocked(j, err)
}

// abortLocked is abort with s.mu held.
func (s *appSession) abortLocked(j *Job, err error) {
	dropped := s.dropQueuedLocked(j)
	switch {
	case !s.failLocked(j, err):
	case dropped:
		s.cancelAfterHangUpLocked(j)
	default:
		s.cancelDetachedLocked(j)
	}
}

// fail ends j with err if it is still running; it reports whether it did.
func (s *appSession) fail(j *Job, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failLocked(j, err)
}

func (s *appSession) failLocked(j *Job, err error) bool {
	if id := j.key(); s.pending[id] == j {
		delete(s.pending, id)
	}
	return j.finish(nil, err)
}

func (s *appSession) completeLocked(j *Job, data []json.RawMessage) {
	if id := j.key(); s.pending[id] == j {
		delete(s.pending, id)
	}
	j.finish(data, nil)
}

// key is the job's key in s.pending: its event id, or a local key for v0
// jobs (whose event id arrives late and which have their own stream).
func (j *Job) key() string {
	if j.v0key != "" {
		return j.v0key
	}
	return j.id
}

// dropState removes outputs of skip_api components (gr.State, layout
// updates), as the Python client does, when the data has one value per
// output.
func (s *appSession) dropState(d *Dependency, data []json.RawMessage) []json.RawMessage {
	cfg := s.config()
	if len(data) != len(d.Outputs) {
		return data
	}
	drop := false
	for _, id := range d.Outputs {
		if cfg.IsState(id) {
			drop = true
			break
		}
	}
	if !drop {
		return data
	}
	out := make([]json.RawMessage, 0, len(data))
	for i, id := range d.Outputs {
		if !cfg.IsState(id) {
			out = append(out, data[i])
		}
	}
	return out
}

// buildArgs turns a call's arguments into the data array of dep: keyword
// arguments and defaults resolved (through /info when needed), files
// uploaded. info is nil when /info was not needed.
func (s *appSession) buildArgs(ctx context.Context, cfg *Config, dep *Dependency, endpoint string, args []any) ([]any, *EndpointInfo, error) {
	var info *EndpointInfo
	if needsInfo(cfg, dep, args) || s.app.set.oauthToken != "" {
		ai, err := s.app.apiInfo(ctx)
		if err != nil {
			return nil, nil, err
		}
		info = ai.Endpoint(dep)
	}
	data, err := buildData(cfg, dep, endpoint, info, args)
	if err != nil {
		return nil, nil, err
	}
	for i, v := range data {
		if v == nil {
			continue
		}
		n, changed, err := s.prepareArgs(ctx, endpoint, v)
		if err != nil {
			return nil, nil, err
		}
		if changed {
			data[i] = n
		}
	}
	return data, info, nil
}
