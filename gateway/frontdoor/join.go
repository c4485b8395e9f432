package frontdoor

// POST queue/join: binding a caller session to a replica, taking a slot
// there, forwarding the join and classifying its answer (gradio.ClassifyJoin),
// moving a refused join to another replica.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/appshape"
	"github.com/gradiopool/gradiopool/pool"
)

// refusal is a join the replica provably did not take: its answer (zero
// when the replica gave none) and why.
type refusal struct {
	answer
	err error
}

// handleJoin is POST queue/join: bind the session (first join), take a
// slot of its replica, forward the join with the backend session hash, and
// keep the slot until the call ends.
func (f *FrontDoor) handleJoin(w http.ResponseWriter, r *http.Request) {
	m, ok := f.readBody(w, r)
	if !ok {
		return
	}
	front := str(m["session_hash"])
	if front == "" {
		detail(w, http.StatusBadRequest, "Session hash not found.")
		return
	}
	select {
	case <-f.drain:
		w.Header().Set("Retry-After", "1")
		detail(w, http.StatusServiceUnavailable, drainingDetail)
		return
	default:
	}
	if !validHash(front) {
		detail(w, http.StatusBadRequest, "session_hash must be 1-128 letters, digits, '-', '_' or '.'")
		return
	}
	u, err := user(r)
	if err != nil {
		detail(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	s, err := f.sessionFor(ctx, front, f.owner(r), f.clientID(r), true)
	if err != nil {
		sessionRefused(w, err)
		return
	}
	if s == nil {
		detail(w, http.StatusForbidden, "this session_hash belongs to other credentials")
		return
	}
	defer s.handlingJoin()()
	f.stats.joins.Add(1)
	endpoint := "fn_index=" + string(m["fn_index"])
	c := &call{endpoint: endpoint, start: f.conf().Now()}
	handedOff := false // the call waits in the gateway's queue: its goroutine owns release
	if f.conf().BeginCall != nil {
		release, ok := f.conf().BeginCall(r)
		if !ok {
			w.Header().Set("Retry-After", "1")
			detail(w, http.StatusTooManyRequests, tooManyCallsDetail)
			return
		}
		c.release = release
		defer func() {
			if !handedOff && !c.kept.Load() {
				release()
			}
		}()
	}
	if u != "" {
		c.user = f.conf().HashUser(u)
		f.annotate(r, slog.String("user", c.user))
	}
	f.annotate(r, slog.String("endpoint", endpoint))
	place := func(r *http.Request, c *call) answer {
		return f.settle(r, c, f.placeJoin(r, s, u, m, c, f.Spreadable(m["fn_index"])))
	}
	if f.queueShown() && !f.hasReference() {
		// No replica connected yet: the join waits for the app in the
		// gateway's queue, shown like a wait for a slot (refwait.go).
		handedOff = f.joinQueued(w, r, s, c, func(r *http.Request, c *call) answer {
			if err := f.awaitReference(r.Context(), c.watch); err != nil {
				return f.settle(r, c, f.noSlot(r, s, err, c.start))
			}
			if !f.knownFn(m["fn_index"]) {
				// The app refuses it: that is the caller's answer if it
				// was not told it waits yet (no wait shown from here on).
				c.watch = nil
			}
			return place(r, c)
		})
		return
	}
	if f.queueShown() && f.knownFn(m["fn_index"]) {
		handedOff = f.joinQueued(w, r, s, c, place)
		return
	}
	s.answer(r.Context(), w, place(r, c))
}

// answer writes a join's answer once no stream of s is closing
// (callerSession.awaitClosed): the caller must have let go of that
// stream before it hears of the call.
func (s *callerSession) answer(ctx context.Context, w http.ResponseWriter, a answer) {
	s.awaitClosed(ctx)
	a.writeTo(w)
}

// settle reports how admission ended c (a.end), once, unless a replica
// accepted it (its end is reported when it ends): to Config.OnCall, which
// also ends its count against its client's limit, and to the access log.
func (f *FrontDoor) settle(r *http.Request, c *call, a answer) answer {
	if a.accepted {
		return a
	}
	f.reportCall(c, a.end)
	if a.end != codeClientClosed {
		f.annotate(r, slog.String("error_code", a.end))
	}
	return a
}

// placeJoin takes a slot for the call (waiting in the gateway's queue
// when every replica is busy; whether it is relayed or bridged is decided
// by the replica it gets: joinAt, mixed.go), forwards its join and
// returns the caller's answer: the join's, or the gateway's refusal.
func (f *FrontDoor) placeJoin(r *http.Request, s *callerSession, u string, m map[string]json.RawMessage, c *call, spread bool) answer {
	ctx := r.Context()
	front, endpoint := s.front, c.endpoint
	var tried []string
	var last *refusal
	for range len(f.replicaNames()) + 1 {
		slot, b, err := f.slotFor(ctx, s, u, tried, endpoint, c.watch, spread)
		if err != nil {
			if last != nil {
				break
			}
			return f.noSlot(r, s, err, c.start)
		}
		c.replica, c.backend, c.spread, c.wait = b.Replica, b.Backend, spread, f.conf().Now().Sub(c.start)
		f.annotate(r, slog.String("replica", b.Replica))
		a, ref := f.joinAt(r, s, slot, b, m, c)
		if ref == nil {
			return a
		}
		f.stats.refused.Add(1)
		slot.Done(gradio.JoinNotAccepted, ref.err)
		f.log.Warn("front door: replica refused a join", slog.String("replica", b.Replica),
			slog.String("session", shortHash(front)), slog.String("user", f.conf().HashUser(u)), slog.Any("error", ref.err))
		last = ref
		if !spread && len(s.callsOn(b.Replica, false)) > 0 {
			break // the session's other calls run there: it cannot move
		}
		tried = append(tried, b.Replica)
	}
	if last == nil {
		return detailOf(http.StatusServiceUnavailable, "gradiopool: no replica can take the call").ending(codeRefused)
	}
	if last.body != nil {
		return f.replicaAnswer(last.answer, "gradiopool: the replicas refused the call").ending(codeRefused)
	}
	return f.errDetail(http.StatusServiceUnavailable, "gradiopool: the replicas refused the call", last.err).ending(codeRefused)
}

// tooManyCallsDetail answers a join past the client's call limit.
const tooManyCallsDetail = "gradiopool: this client has max_calls_per_client calls in flight already; retry when one ends"

// noSlot answers a join for which no replica gave a slot (the first
// attempt: later ones answer with the last replica's refusal); the join
// arrived at start.
func (f *FrontDoor) noSlot(r *http.Request, s *callerSession, err error, start time.Time) answer {
	if r.Context().Err() != nil {
		return answer{end: codeClientClosed}
	}
	f.log.Warn("front door: no replica can take a join", slog.String("session", shortHash(s.front)), slog.Any("error", err))
	if busy := f.busyDetail(err, start); busy != "" {
		// Not 503: the official JS client shows its own "This
		// application is currently busy" for a 503 and drops the
		// detail; for other statuses it shows the detail.
		a := detailOf(http.StatusTooManyRequests, busy).ending(codeNoReplica)
		a.retry = true
		return a
	}
	return f.errDetail(http.StatusServiceUnavailable, "gradiopool: no replica can take the call", err).ending(codeNoReplica)
}

// busyDetail is the gateway's own message for a join that found every
// replica busy (its queue time-out, or its queue full), "" for other
// errors. It names no replica.
func (f *FrontDoor) busyDetail(err error, start time.Time) string {
	n := len(f.replicaNames())
	switch {
	case errors.Is(err, pool.ErrQueueTimeout):
		waited := f.conf().Now().Sub(start).Round(100 * time.Millisecond)
		return fmt.Sprintf("gradiopool: all %d replicas are busy; waited %s for one (queue_timeout); retry later", n, waited)
	case errors.Is(err, pool.ErrQueueFull):
		return fmt.Sprintf("gradiopool: all %d replicas are busy and the gateway's queue is full (max_waiters); retry later", n)
	}
	return ""
}

// errDetail answers msg in Gradio's shape, followed by err's text only when
// Config.ShowReplicaErrors is set: pool errors name the replicas (their
// URLs), which callers do not see by default.
func (f *FrontDoor) errDetail(status int, msg string, err error) answer {
	if f.conf().ShowReplicaErrors && err != nil {
		msg += ": " + err.Error()
	}
	return detailOf(status, msg)
}

// slotFor returns a slot for the session's next call: on its replica, or
// on a new one when it is not bound yet or its replica is in tried (it
// refused) or serves another app than the reference; moving loses the
// backend session (and its gr.State).
//
// A spread call (spread set) goes to the replica the pool picks, under
// the session's backend session there; it binds the session only when
// the session has no replica yet.
//
// No lock is held while a slot is awaited: each join reads the binding,
// waits for its slot, and binds (or moves) the session only if nobody
// did meanwhile (rebind); a join that lost that race gives its slot back
// and follows the session to where the winner bound it. So the joins of
// one session wait in the pool's queues side by side, not behind each
// other.
func (f *FrontDoor) slotFor(ctx context.Context, s *callerSession, u string, tried []string, endpoint string, watch *joinWatch, spread bool) (*pool.Slot, binding, error) {
	if err := f.ensureReference(ctx); err != nil {
		return nil, binding{}, err
	}
	if spread && s.binding().Replica != "" {
		l, err := f.pickReplica(ctx, u, slices.Clone(tried), endpoint, watch)
		if err != nil {
			return nil, binding{}, err
		}
		b := s.binding()
		b.Replica, b.Backend = l.Replica(), s.laneBackend(l.Replica())
		return l, b, nil
	}
	// Each round either returns or saw the binding change under it; a
	// binding changes at most once per replica refusing, so this bound is
	// never reached but by a session moving back and forth.
	for range len(f.replicaNames()) + 2 {
		b := s.binding()
		skip := slices.Clone(tried)
		if b.Replica != "" && !slices.Contains(tried, b.Replica) {
			l, err := f.p.Reserve(ctx, u, pool.ReserveOptions{Replica: b.Replica, Endpoint: endpoint, Watch: watch.poolWatch()})
			if err == nil {
				cerr := f.checkApp(b.Replica, l.App().Config())
				switch {
				case cerr == nil && s.binding() == b:
					return l, b, nil
				case cerr == nil: // moved meanwhile: follow it
					l.Release()
					continue
				}
				l.Release()
				if len(s.callsOn(b.Replica, false)) > 0 {
					return nil, b, cerr
				}
				// Its app changed to another: move.
			} else {
				var re *pool.ReplicaError
				if ctx.Err() != nil || errors.Is(err, pool.ErrQueueTimeout) || errors.Is(err, pool.ErrQueueFull) ||
					!(errors.As(err, &re) || errors.Is(err, pool.ErrUnknownReplica)) || len(s.callsOn(b.Replica, false)) > 0 {
					return nil, b, err
				}
				// The replica cannot serve (ejected, unreachable, removed by
				// a reload): move.
			}
			skip = append(skip, b.Replica)
		}
		l, err := f.pickReplica(ctx, u, skip, endpoint, watch)
		if err != nil {
			return nil, b, err
		}
		nb, hadState, ok := s.rebind(b, l.Replica())
		if !ok {
			if nb.Replica == l.Replica() {
				return l, nb, nil // another join bound it here meanwhile
			}
			l.Release()
			continue
		}
		if b.Replica != "" {
			f.stats.moved.Add(1)
			if hadState {
				f.stats.stateLost.Add(1)
			}
			f.log.Warn("front door: session moved to another replica; its gr.State starts empty there",
				slog.String("from", b.Replica), slog.String("to", nb.Replica), slog.String("session", shortHash(s.front)),
				slog.String("user", f.conf().HashUser(u)), slog.Bool("state_lost", hadState))
		} else {
			f.log.Debug("front door: session bound", slog.String("replica", nb.Replica),
				slog.String("session", shortHash(s.front)), slog.String("user", f.conf().HashUser(u)))
		}
		return l, nb, nil
	}
	return nil, s.binding(), errors.New("gradiopool: the session's replica kept changing while its call waited")
}

// pickReplica reserves a slot on the replica the pool's rule picks,
// skipping skip and the replicas known to serve another app than the
// reference.
func (f *FrontDoor) pickReplica(ctx context.Context, u string, skip []string, endpoint string, watch *joinWatch) (*pool.Slot, error) {
	// Replicas known to serve another app are skipped; one that is
	// connected again is re-checked first (its app may be fixed now).
	var odd []string
	for n := range f.mismatched() {
		if app := f.p.ConnectedApp(n); app != nil && f.checkApp(n, app.Config()) != nil {
			skip = append(skip, n)
			odd = append(odd, n)
		}
	}
	for range len(f.replicaNames()) {
		l, err := f.p.Reserve(ctx, u, pool.ReserveOptions{Exclude: skip, Endpoint: endpoint, Watch: watch.poolWatch()})
		if err != nil {
			if len(odd) > 0 {
				slices.Sort(odd)
				err = fmt.Errorf("%w (not used: %s serve(s) another app than the reference replica)", err, strings.Join(odd, ", "))
			}
			return nil, err
		}
		if f.checkApp(l.Replica(), l.App().Config()) == nil {
			return l, nil
		}
		odd = append(odd, l.Replica())
		skip = append(skip, l.Replica())
		l.Release()
	}
	return nil, fmt.Errorf("%w: every replica that took the call serves another app than the reference replica", errConfigMismatch)
}

// join forwards one join under slot. Without a refusal, the answer is the
// caller's (accepted, or an error that moving would not fix) and the
// slot's outcome is reported; with one, the replica refused and the
// caller's join may go elsewhere (the caller reports the refusal).
func (f *FrontDoor) join(r *http.Request, s *callerSession, slot *pool.Slot, b binding, m map[string]json.RawMessage, c *call) (answer, *refusal) {
	endpoint := c.endpoint
	app := slot.App()
	body := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		body[k] = v
	}
	body["session_hash"], _ = json.Marshal(b.Backend)
	appshape.MapTriggerID(body, f.ids.Get(f.presented(), app.Config()))
	if data, ok := m["data"]; ok {
		nd, err := f.localizeFiles(r.Context(), app, b.Replica, data)
		if err != nil {
			var bad *badFileError
			if errors.As(err, &bad) {
				slot.Release()
				return detailOf(http.StatusBadRequest, bad.Error()).ending(codeBadInput), nil
			}
			return answer{}, &refusal{err: fmt.Errorf("sending uploads: %w", err)}
		}
		body["data"] = nd
	}
	out, _ := json.Marshal(body)
	// Decided before the join is sent: a call whose caller was not told
	// it waits is never shown, and gets the replica's answer and id.
	c.aliased()
	// The replica may run the call and stream its messages before its
	// answer is read here: a shown call's stream holds them until the
	// replica's event id is mapped to the gateway's (frontIDs).
	defer s.joinCall(c)()
	// The join must not be cut half-way by a caller that goes away: the
	// app may have queued the call, and its slot must be accounted. Nor
	// by a fixed header time-out: a replica short of threads answers late
	// and still queues the call (DoWhileAlive).
	jctx := context.WithoutCancel(r.Context())
	req, err := app.NewRequest(jctx, http.MethodPost, app.URL("queue/join"), bytes.NewReader(out))
	if err != nil {
		slot.Release()
		return detailOf(http.StatusInternalServerError, err.Error()).ending(codeNoReplica), nil
	}
	req.Header.Set("Content-Type", "application/json")
	if v := r.Header.Get("X-Gradio-User"); v != "" {
		req.Header.Set("X-Gradio-User", v)
	}
	f.callerHeaders(r, req.Header)
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { sent.Store(i.Err == nil) },
	}))
	resp, err := app.DoWhileAlive(req)
	if err != nil {
		if !sent.Load() {
			return answer{}, &refusal{err: fmt.Errorf("queue/join not sent: %w", err)}
		}
		// Sent, no answer: the app may have queued it. Never run twice.
		slot.Release()
		f.stats.lost.Add(1)
		return detailOf(http.StatusBadGateway, "gradiopool: the replica did not answer the join; the call may have been queued there and is not run again").ending(codeReplicaLost), nil
	}
	rb, err := readSmall(resp)
	ctype := resp.Header.Get("Content-Type")
	if err != nil {
		slot.Release()
		f.stats.lost.Add(1)
		return detailOf(http.StatusBadGateway, "gradiopool: the replica's answer to the join was cut; the call may have been queued there and is not run again").ending(codeReplicaLost), nil
	}
	// One rule for what the answer proves (gradio.ClassifyJoin), the one
	// the pool follows for its own calls.
	var fn int
	fnKnown := json.Unmarshal(m["fn_index"], &fn) == nil && app.Config().HasFn(fn)
	eventID, jerr := gradio.JoinAnswer(resp.StatusCode, rb, fnKnown)
	switch gradio.ClassifyJoin(jerr) {
	case gradio.JoinAccepted:
		slot.Done(gradio.JoinAccepted, nil)
		s.addPending(eventID, slot, c)
		a := relayed(resp.StatusCode, ctype, rb)
		a.accepted = true
		return a, nil
	case gradio.JoinNotAccepted:
		a := relayed(resp.StatusCode, ctype, rb)
		a.full = errors.Is(jerr, gradio.ErrQueueFull)
		return answer{}, &refusal{answer: a, err: jerr}
	case gradio.JoinCallerFault:
		// Refused for the caller's input: the caller's answer; another
		// replica would refuse it too, and the replica is not at fault.
		slot.Done(gradio.JoinCallerFault, jerr)
		f.stats.callerFaults.Add(1)
		f.log.Info("front door: the app refused a join's input", slog.String("replica", b.Replica),
			slog.String("session", shortHash(s.front)), slog.String("endpoint", endpoint), slog.Any("error", jerr))
		return f.callerFault(relayed(resp.StatusCode, ctype, rb), jerr).ending(codeBadInput), nil
	}
	// Maybe accepted (a proxy's 504, an answer without an event id): never
	// run again.
	slot.Done(gradio.JoinMaybeAccepted, jerr)
	return f.replicaAnswer(relayed(resp.StatusCode, ctype, rb),
		"gradiopool: the replica's answer to the join was not Gradio's; the call may have been queued there and is not run again").ending(codeReplicaLost), nil
}

// callerFault answers a join the app refused because of what the caller
// sent, as a 4xx in Gradio's shape ({"detail": ...}). The replica's own
// answer is relayed when it is already that (Gradio's 400/422 details), or
// when Config.ShowReplicaErrors is set; a 500 for an unknown fn_index (a
// Python traceback from Gradio 5.0 to 6.8) never reaches the caller
// otherwise.
func (f *FrontDoor) callerFault(a answer, err error) answer {
	switch {
	case f.conf().ShowReplicaErrors:
		return a
	case a.status >= 400 && a.status < 500 && gradioDetail(a.body):
		a.ctype = "application/json"
		return a
	case errors.Is(err, gradio.ErrUnknownEndpoint):
		return detailOf(http.StatusBadRequest, "gradiopool: the app has no function with this fn_index")
	case a.status >= 400 && a.status < 500:
		return detailOf(a.status, "gradiopool: the app refused the call's input")
	}
	return detailOf(http.StatusBadRequest, "gradiopool: the app refused the call's input")
}

// replicaAnswer passes a replica's non-200 answer on: as is when it is
// Gradio's {"detail": ...} shape or Config.ShowReplicaErrors is set, else
// as msg with the replica's status (its body may hold a traceback or the
// replica's address).
func (f *FrontDoor) replicaAnswer(a answer, msg string) answer {
	if f.conf().ShowReplicaErrors || (a.status >= 200 && a.status < 300) || gradioDetail(a.body) {
		return a
	}
	return detailOf(a.status, msg)
}
