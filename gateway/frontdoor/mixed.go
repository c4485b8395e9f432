package frontdoor

// A replica set mixing Gradio generations (a rolling upgrade of the
// Spaces: 3.50 next to 4.16, 4.44 and 5.49): callers see one Gradio 5 app,
// and each call is served the way the replica it runs on needs.
//
// Why per replica and not per app: the generations differ in how a call
// is carried (sse_v3 relays byte for byte; older protocols need the
// bridge, see bridge.go), not in what the app is (the shape check,
// appshape.Shape, compares endpoints only). A choice made once for the app
// would have to refuse the replicas of the other generations, or bridge
// them all and lose the relay where it is exact. So the choice is made
// for each call, once its replica is known (joinAt): relayed when the
// replica speaks sse_v3 (whatever its API prefix: the gateway sends the
// join to the replica's own URLs and writes file URLs under the prefix it
// presents, so mapping the prefix is only a matter of URLs), bridged
// otherwise. A caller session whose calls run on replicas of several
// generations (a spread call, or a move after its replica failed) keeps
// one queue/data stream: handleData relays the sse_v3 replicas' streams
// and writes the bridge's messages on the same stream.
//
// What is spread: stateless calls (Spreadable) go to the replica the pool
// picks, relayed or bridged as that replica needs (a bridged call runs on
// the caller session's Go session there, one per replica). Calls with
// gr.State run on the session's replica. gr.State does not cross
// replicas (and so not generations): a session that moves starts with an
// empty state, as before.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/appshape"
	"github.com/gradiopool/gradiopool/pool"
)

// needsBridge reports whether calls to an app with config c are bridged:
// every generation older than sse_v3.
func needsBridge(c *gradio.Config) bool {
	return bridgedProtocol(c.Protocol)
}

// relayable reports whether the gateway relays the stream of replica: its
// connected app speaks sse_v3. A replica not connected now counts as
// relayable (it had calls relayed if it has a lane at all).
func (f *FrontDoor) relayable(replica string) bool {
	if replica == "" || f.p == nil {
		return false
	}
	app := f.p.ConnectedApp(replica)
	return app == nil || !needsBridge(app.Config())
}

// presented returns the config /config presents now (handleConfig's
// choice, see reference: the first connected replica in pool order that
// serves the reference app), nil when none is connected. Nothing waits:
// it runs for every relayed stream and bridged call.
func (f *FrontDoor) presented() *gradio.Config {
	for _, n := range f.replicaNames() {
		if app := f.p.ConnectedApp(n); app != nil && f.checkApp(n, app.Config()) == nil {
			return app.Config()
		}
	}
	return nil
}

// callerPrefix is the API prefix of the app the front door presents: the
// reference replica's when it is relayed (Gradio 4.44 has none), Gradio
// 5's when it is bridged. File URLs the gateway writes use it, whichever
// replica ran the call (the gateway answers both forms anyway).
func (f *FrontDoor) callerPrefix() string {
	if c := f.presented(); c != nil && !needsBridge(c) {
		return c.APIPrefix
	}
	return bridgePrefix
}

// transport is how a call travels between its caller and its replica,
// chosen per call by the replica's protocol (joinAt): relayed to an
// sse_v3 replica, whose session stream a lane relays byte for byte
// (join.go, data.go), or bridged to an older one, the Go client running
// the call and the gateway writing its events as sse_v3 messages
// (bridge.go).
type transport interface {
	// submit places c at b's replica under slot. Without a refusal the
	// answer is the caller's (accepted, or an error another replica would
	// not fix); with one the replica refused, and the join may go
	// elsewhere.
	submit(r *http.Request, s *callerSession, slot *pool.Slot, b binding, m map[string]json.RawMessage, c *call) (answer, *refusal)
	// takeBack ends accepted call id, which nobody reads, at its replica
	// b; its slot is free already.
	takeBack(s *callerSession, c *call, b binding, id string)
	// laned reports whether the call's messages come over its replica's
	// session stream (a lane of handleData) rather than from the gateway.
	laned() bool
}

// relay is the transport of sse_v3 replicas.
type relay struct{ f *FrontDoor }

// bridge is the transport of older replicas.
type bridge struct{ f *FrontDoor }

func (t relay) submit(r *http.Request, s *callerSession, slot *pool.Slot, b binding, m map[string]json.RawMessage, c *call) (answer, *refusal) {
	return t.f.join(r, s, slot, b, m, c)
}

// takeBack: Gradio 4.x-5.x cancel only running calls, so a queued one
// would run later for nobody, on a slot the gateway no longer counts. A
// stream of its session that opens and drops makes the replica drop the
// session's queued calls (clean_events); nobody reads the session. The
// drop goes first: Gradio answers a cancel with the call's completion,
// after which the session's stream closes cleanly, dropping nothing.
func (t relay) takeBack(_ *callerSession, c *call, b binding, id string) {
	t.f.dropAtReplica(b)
	t.f.cancelAtReplica(b, id, strings.TrimPrefix(c.endpoint, "fn_index="))
}

func (relay) laned() bool { return true }

func (t bridge) submit(r *http.Request, s *callerSession, slot *pool.Slot, _ binding, m map[string]json.RawMessage, c *call) (answer, *refusal) {
	var fn int
	if err := json.Unmarshal(m["fn_index"], &fn); err != nil {
		return t.f.bridgeCallerFault(slot, err, http.StatusUnprocessableEntity, "fn_index must be an integer"), nil
	}
	a, err := t.f.bridgeSubmit(r, s, slot, fn, m["data"], c)
	if err == nil {
		return a, nil
	}
	ref := &refusal{err: err}
	if errors.Is(err, gradio.ErrQueueFull) {
		// Gradio's own answer to a full queue; the JS client shows its
		// busy message.
		ref.answer = relayed(http.StatusServiceUnavailable, "application/json", []byte(`{"detail":"Queue is full! Please try again."}`))
		ref.answer.full = true
	}
	return answer{}, ref
}

// takeBack: the Go job is cancelled, which stops the call at the replica
// in its protocol's way.
func (bridge) takeBack(s *callerSession, _ *call, _ binding, id string) {
	if br := s.bridgeOf(false); br != nil {
		br.cancelJob(id)
	}
}

func (bridge) laned() bool { return false }

// joinAt runs the join under slot the way its replica needs (its
// transport), as transport.submit.
func (f *FrontDoor) joinAt(r *http.Request, s *callerSession, slot *pool.Slot, b binding, m map[string]json.RawMessage, c *call) (answer, *refusal) {
	c.via = relay{f}
	if needsBridge(slot.App().Config()) {
		c.via = bridge{f}
	}
	return c.via.submit(r, s, slot, b, m, c)
}

// streamDrained reports that s has no call left for its stream (see
// drainedLocked).
func (s *callerSession) streamDrained() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drainedLocked()
}

// drainedLocked reports that s has no call left for its stream: no join
// being handled, no relayed call in flight, none in the gateway's queue,
// no bridged call running and no bridge message unwritten; s.mu is held
// (then the bridge's: nothing takes them the other way round).
func (s *callerSession) drainedLocked() bool {
	if s.handling > 0 {
		return false
	}
	for _, c := range s.calls {
		if c.via.laned() {
			return false
		}
	}
	for _, c := range s.queued {
		if c.state != callAccepted {
			return false
		}
	}
	if br := s.br; br != nil {
		br.mu.Lock()
		defer br.mu.Unlock()
		return len(br.jobs) == 0 && len(br.out) == 0
	}
	return true
}

// closeAckWait bounds how long a caller's stream stays open after its
// close_stream for its caller to let go of it (the official clients close
// it as soon as they read close_stream), and so how long a join of the
// session waits for that before it is answered.
const closeAckWait = time.Second

// closeIfDrained marks a stream of s as closing when s has no call left
// for it (drainedLocked), in one step under s.mu, as a join starts
// (handlingJoin): a join that started before keeps the stream open, and
// one that starts after is answered once the caller let go of the stream
// (closed, awaitClosed). A stream that closes must be marked so.
//
// Why: the official JS client puts a joined call on its open stream and
// opens none while it has one; it closes its stream when it reads
// close_stream, whatever calls it waits for. A join answered after
// close_stream was written but before the client read it would put the
// call on the closing stream: its messages are never read (the client's
// close race, PROTOCOL.md 4.8). Answered after the client let go of the
// stream, the call opens a new one. A check of drained apart from the
// mark would let a join start and be answered between them.
func (s *callerSession) closeIfDrained() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.drainedLocked() {
		return false
	}
	if s.closingStream == nil {
		s.closingStream = make(chan struct{})
	}
	// Streams of a session overlap: the client opens its next while the
	// gateway still waits for it to let go of the last (its abort crosses
	// a balancer and a forwarding gateway). Each closing stream counts, so
	// that the first to be let go of does not end the others' wait.
	s.closingN++
	return true
}

// closed ends a stream's closing (closeIfDrained), once its caller let go
// of the stream (ctx ended) or closeAckWait passed.
func (s *callerSession) closed(ctx context.Context) {
	t := time.NewTimer(closeAckWait)
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-s.f.ctx.Done():
	}
	t.Stop()
	s.mu.Lock()
	var ch chan struct{}
	if s.closingN--; s.closingN <= 0 {
		ch, s.closingStream, s.closingN = s.closingStream, nil, 0
	}
	s.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// awaitClosed waits while a stream of s is closing (closeIfDrained): a
// join's answer goes after it.
func (s *callerSession) awaitClosed(ctx context.Context) {
	s.mu.Lock()
	ch := s.closingStream
	s.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// handlingJoin counts a join of s being handled until the returned func
// runs, which wakes the session's stream to look again.
//
// Why: the official JS client closes its stream at close_stream whatever
// calls it waits for, and opens a new one after a join's answer only when
// it has none open. A close_stream written while a join is handled (after
// the session's last call ended, before the join's call is in flight) can
// reach the client after the join's answer: that call's messages then
// have no stream, and the call is cancelled at ReadGrace. So the stream
// stays open until the join is answered; its call is then in flight, or
// it failed and the stream may close.
func (s *callerSession) handlingJoin() func() {
	s.mu.Lock()
	s.handling++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.handling--
		s.mu.Unlock()
		s.poke()
	}
}

// releaseStream ends what the caller's stream carried when the caller
// went away: its calls waiting in the gateway's queue, its relayed calls
// (the replicas drop them when their streams close, Gradio's rule; their
// slots are freed now) and its bridged calls (cancelled; their slots are
// freed when the replica let them go). Unlike releaseAll the session's
// bridge stays usable for its next calls.
func (s *callerSession) releaseStream(code string) {
	s.cancelQueued()
	s.mu.Lock()
	var ended []*call
	for id, c := range s.calls {
		if c.via.laned() {
			ended = append(ended, s.takeLocked(id))
		}
	}
	br := s.br
	s.mu.Unlock()
	if br != nil {
		br.cancelAll()
	}
	s.endCalls(ended, code)
}

// bridgeMessages returns the bridge's messages for the caller's stream.
func (s *callerSession) bridgeMessages() [][]byte {
	br := s.bridgeOf(false)
	if br == nil {
		return nil
	}
	out, _ := br.take()
	return out
}

// presentedModern reports whether the app the front door presents is
// Gradio 5 or later: a bridged reference is presented as bridgeVersion, a
// relayed one as itself (Gradio 4.44 stays 4.44).
func (f *FrontDoor) presentedModern() bool {
	if c := f.presented(); c != nil && !needsBridge(c) {
		return majorAtLeast(c.Version, 5)
	}
	return true
}

// majorAtLeast reports whether Gradio version v is major.0 or later.
func majorAtLeast(v string, major int) bool {
	m, _, _ := strings.Cut(strings.TrimSpace(v), ".")
	n, err := strconv.Atoi(m)
	return err == nil && n >= major
}

// presentError gives a relayed failed process_completed the gr.Error text
// of the presented generation: Gradio before 5.0 sends repr(message)
// (Python quotes included, see gradio/pyrepr.go), 5.0 and later the
// message. Replicas of one generation pass unchanged.
func (f *FrontDoor) presentError(app *gradio.Client, data []byte) []byte {
	modern := f.presentedModern()
	if majorAtLeast(app.Config().Version, 5) == modern {
		return data
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil {
		return data
	}
	out, _ := m["output"].(map[string]any)
	text, ok := out["error"].(string)
	if !ok {
		return data
	}
	if modern {
		if t, ok := gradio.UnPyRepr(text); ok {
			out["error"] = t
		}
	} else {
		out["error"] = gradio.PyRepr(text)
	}
	return appshape.Marshal(m)
}
