package frontdoor

// The bridge: calls that run on a replica older than sse_v3 are served to
// the caller as Gradio 5 (sse_v3) by the gateway itself (which replica
// runs a call, and so whether it is bridged, is decided per call: see
// mixed.go).
//
// Why bridging and not relaying for the older generations: the official
// clients of today (@gradio/client 2.x, gradio_client 1.x) only finish
// calls over sse_v3. The older protocols differ from it in more than
// message shapes: sse (Gradio 4.0-4.8) has one stream per call and asks
// for the data with send_data; sse_v1, sse_v2 and sse_v2.1 hang up the
// session's stream instead of sending close_stream and send their file
// URLs differently; Gradio 3 speaks WebSockets. A byte relay would have to
// rewrite each of these streams message by message and keep two different
// stream lifetimes (the caller's and the replica's) in step — a second
// implementation of every generation. The Go client (package gradio)
// already speaks each of them and turns them into one generation-neutral
// sequence of events (queued, started, progress, output with diffs
// applied, completed or error), so for those apps the front door runs each
// call with the Go client on a session of its own per caller session, and
// writes the events as sse_v3 messages. sse_v3 replicas keep the byte
// relay (data.go): nothing is lost in translation there.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/appshape"
	"github.com/gradiopool/gradiopool/pool"
)

// bridgeVersion is the Gradio version the bridge presents: the release
// whose sse_v3 messages it writes (the captured 5.49.1 transcripts).
const bridgeVersion = "5.49.1"

// bridgePrefix is the API prefix the bridge presents (Gradio 5's).
const bridgePrefix = "/gradio_api"

// bridgedProtocol reports whether callers of an app speaking protocol p
// are bridged: every generation older than sse_v3 that the Go client
// speaks, Gradio 3 (ws) included (its file and /info shapes are mapped in
// internal/appshape).
func bridgedProtocol(p string) bool {
	switch p {
	case "sse", "sse_v1", "sse_v2", "sse_v2.1", "ws":
		return true
	}
	return false
}

// bridgeState is a caller session's side of the bridge: its Go client
// sessions on the bridged replicas its calls ran on (gr.State lives there
// between calls) and the sse_v3 messages its queue/data stream has not
// taken yet.
type bridgeState struct {
	mu sync.Mutex // guards the fields below; no I/O under it
	// clients holds the caller session's own Go session per replica: the
	// session's replica, and those its spread calls ran on. At most one
	// per replica.
	clients map[string]bridgeClient
	jobs    map[string]*bridgeJob
	out     [][]byte
	outSize int // the bytes of out
	closed  bool
	wake    chan struct{} // a token when out or jobs changed (the session's wake)
}

// bridgeClient is a caller session's Go session on one replica.
type bridgeClient struct {
	app    *gradio.Client // the pool's app the session was made from
	client *gradio.Client // the caller session's own session there
}

// bridgeJob is one bridged call the caller has not seen end yet.
type bridgeJob struct {
	cancel context.CancelFunc
	gens   int  // process_generating messages queued
	ended  bool // its last message is queued
}

// maxBridgeOut and maxBridgeOutBytes bound the messages queued for a
// caller that does not read its stream: past either the oldest progress
// and generating messages are dropped (never a completion, nor a
// generator's first output, the base of the "replace" diffs after it).
const maxBridgeOut, maxBridgeOutBytes = 1024, 16 << 20

// bridgeOf returns s's bridge state, making it when create is set. Its
// messages wake the session's data stream (s.wake), which also relays the
// session's sse_v3 calls.
func (s *callerSession) bridgeOf(create bool) *bridgeState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.br == nil && create {
		s.br = &bridgeState{clients: map[string]bridgeClient{}, jobs: map[string]*bridgeJob{}, wake: s.wake}
	}
	return s.br
}

// signal wakes the stream; b.mu is held.
func (b *bridgeState) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// push queues msg for the caller; b.mu is held.
func (b *bridgeState) push(msg []byte) {
	for len(b.out) >= maxBridgeOut || b.outSize+len(msg) > maxBridgeOutBytes {
		i := slices.IndexFunc(b.out, func(m []byte) bool {
			return bytes.Contains(m, []byte(`"msg":"progress"`)) ||
				bytes.Contains(m, []byte(`"msg":"process_generating"`)) && bytes.Contains(m, []byte(`[["replace",[],`)) // a later output (handle)
		})
		if i < 0 {
			break
		}
		b.outSize -= len(b.out[i])
		b.out = slices.Delete(b.out, i, i+1)
	}
	b.out = append(b.out, msg)
	b.outSize += len(msg)
	b.signal()
}

// session returns the caller session's Go client on replica, made from
// app (the pool's client there) when there is none or the replica's app
// was reconnected since (its gr.State is gone with the old app: the
// previous session there is closed). Sessions on other replicas stay (as
// the relayed sessions' backend session hashes do): a spread call does not
// end the state of the session's own replica.
func (b *bridgeState) session(replica string, app *gradio.Client) (*gradio.Client, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, gradio.ErrClosed
	}
	cur, ok := b.clients[replica]
	if ok && cur.app == app {
		defer b.mu.Unlock()
		return cur.client, nil
	}
	old := cur.client
	c := app.NewSession()
	b.clients[replica] = bridgeClient{app: app, client: c}
	b.mu.Unlock()
	if old != nil {
		// Not under b.mu: closing ends the session's jobs, whose events
		// reach the hook (bridgeConv.event), which takes b.mu.
		_ = old.Close()
	}
	return c, nil
}

// close cancels the session's calls and closes its Go client session (the
// caller session expired, or the front door closed).
func (b *bridgeState) close() {
	b.mu.Lock()
	b.closed = true
	clients := b.clients
	b.clients = map[string]bridgeClient{}
	var cancels []context.CancelFunc
	for _, j := range b.jobs {
		cancels = append(cancels, j.cancel)
	}
	b.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	for _, c := range clients {
		_ = c.client.Close()
	}
}

// cancelJob ends call id for the caller as Gradio 5's /cancel does (a
// process_completed with empty output) and cancels the Go job: the Go
// client stops it at the replica in that protocol's way. False when the
// call is unknown or already ended.
func (b *bridgeState) cancelJob(id string) bool {
	b.mu.Lock()
	j := b.jobs[id]
	if j == nil || j.ended {
		b.mu.Unlock()
		return false
	}
	j.ended = true
	delete(b.jobs, id)
	b.push(appshape.Marshal(map[string]any{"msg": "process_completed", "event_id": id, "output": map[string]any{}, "success": true, "title": nil}))
	b.mu.Unlock()
	j.cancel()
	return true
}

// cancelAll cancels every call of the session (its caller's stream went
// away: Gradio drops a session's calls then).
func (b *bridgeState) cancelAll() {
	b.mu.Lock()
	ids := make([]string, 0, len(b.jobs))
	for id := range b.jobs {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	for _, id := range ids {
		b.cancelJob(id)
	}
}

// take returns the queued messages and whether no call is left after them
// (the stream may then close).
func (b *bridgeState) take() ([][]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.out
	b.out, b.outSize = nil, 0
	return out, len(b.jobs) == 0
}

// bridgeSubmit submits one call under slot and returns the caller's
// answer, unless the replica refused the call (a non-nil error: the call
// may go to another replica; the slot is the caller's to report).
func (f *FrontDoor) bridgeSubmit(r *http.Request, s *callerSession, slot *pool.Slot, fn int, rawData json.RawMessage, c *call) (answer, error) {
	ctx := r.Context()
	replica := slot.Replica()
	app, err := f.appFor(ctx, replica)
	if err != nil {
		return answer{}, err
	}
	br := s.bridgeOf(true)
	client, err := br.session(replica, app)
	if err != nil {
		return answer{}, err
	}
	cfg := client.Config()
	dep, err := cfg.Endpoint(gradio.FnIndex(fn))
	if err != nil {
		return f.bridgeCallerFault(slot, err, http.StatusBadRequest, "gradiopool: the app has no function with this fn_index"), nil
	}
	if len(rawData) > 0 {
		nd, err := f.localizeFiles(ctx, app, replica, rawData)
		if err != nil {
			var bad *badFileError
			if errors.As(err, &bad) {
				return f.bridgeCallerFault(slot, err, http.StatusBadRequest, bad.Error()), nil
			}
			return answer{}, fmt.Errorf("sending uploads: %w", err)
		}
		rawData = nd
		if cfg.Protocol == appshape.ProtocolWS {
			if rawData, err = appshape.WSArgs(rawData); err != nil {
				return f.bridgeCallerFault(slot, err, http.StatusBadRequest, err.Error()), nil
			}
		}
	}
	var data []json.RawMessage
	if len(rawData) > 0 && string(rawData) != "null" {
		if err := json.Unmarshal(rawData, &data); err != nil {
			return f.bridgeCallerFault(slot, err, http.StatusUnprocessableEntity, "data must be a JSON list"), nil
		}
	}
	if len(data) != len(dep.Inputs) {
		return f.bridgeCallerFault(slot, nil, http.StatusUnprocessableEntity,
			fmt.Sprintf("data has %d values; fn_index %d takes %d inputs", len(data), fn, len(dep.Inputs))), nil
	}
	// The Go client takes the arguments without the State inputs (it
	// sends them as null, for the app to fill in from the session).
	args := make([]any, 0, len(data))
	for i, id := range dep.Inputs {
		if !cfg.IsState(id) {
			args = append(args, data[i])
		}
	}
	// Joined at the replica only once its caller reads: Gradio 4.20
	// (sse_v2) cannot take a queued call back at all, 4.16 (sse_v1) only
	// through a session stream that was open, so a call whose caller
	// never reads would run later for nobody. The wait is shown as one in
	// the gateway's queue, whose read grace ends it; the official clients
	// open their stream right after their first join's answer. Without a
	// shown queue, or once a join of the call went to a relayed replica
	// first (its caller then gets the join's own answer), the answer
	// itself would wait for the stream: the call is joined at once.
	if c.watch != nil && c.mayShow() {
		s.awaitReader(ctx, c.watch) // ended by ctx: handled below, under br.mu
	}
	// The gateway's queued id when the caller was told it while the call
	// waited, else a new one.
	id := c.gatewayID
	if !c.aliased() {
		id = newEventID()
	}
	jctx, cancel := context.WithCancel(f.ctx)
	stopOnDrain := context.AfterFunc(f.stopCalls, cancel)
	conv := &bridgeConv{f: f, br: br, id: id, cfg: cfg, dep: dep, idx: f.replicaIndex(replica), gw: f.root(r), pre: f.callerPrefix(), modern: f.presentedModern(), start: c.start}
	br.mu.Lock()
	if br.closed {
		br.mu.Unlock()
		cancel()
		stopOnDrain()
		return answer{}, gradio.ErrClosed
	}
	if ctx.Err() != nil {
		// Cancelled while it waited (handleCancel ends the wait before
		// it asks the bridge, which is checked under br.mu here): never
		// sent. The caller is told by the end of its wait.
		br.mu.Unlock()
		cancel()
		stopOnDrain()
		slot.Release()
		return answer{end: codeClientClosed}, nil
	}
	br.jobs[id] = &bridgeJob{cancel: cancel}
	br.signal()
	br.mu.Unlock()
	job, err := client.SubmitWith(jctx, gradio.SubmitOptions{Hook: conv.event, Quiet: true}, gradio.FnIndex(fn), args...) // its events reach the caller through the hook
	if err != nil {
		br.mu.Lock()
		delete(br.jobs, id)
		br.signal()
		br.mu.Unlock()
		byCaller := jctx.Err() != nil && f.stopCalls.Err() == nil && f.ctx.Err() == nil
		cancel()
		stopOnDrain()
		if byCaller {
			// The caller cancelled it while its join was on the way
			// (cancelJob told it): not the replica's fault.
			slot.Done(gradio.JoinMaybeAccepted, err)
			return answer{end: codeClientClosed}, nil
		}
		switch gradio.ClassifyJoin(err) {
		case gradio.JoinNotAccepted:
			return answer{}, err
		case gradio.JoinCallerFault:
			msg := "gradiopool: the app refused the call's input"
			var ae *gradio.ArgumentError
			if errors.As(err, &ae) {
				msg = err.Error()
			}
			return f.bridgeCallerFault(slot, err, http.StatusUnprocessableEntity, msg), nil
		}
		slot.Done(gradio.JoinMaybeAccepted, err)
		f.stats.lost.Add(1)
		return f.errDetail(http.StatusBadGateway, "gradiopool: the replica did not accept the call clearly; it may have been queued there and is not run again", err).ending(codeReplicaLost), nil
	}
	slot.Done(gradio.JoinAccepted, nil)
	s.addPending(id, slot, c)
	if f.ctx.Err() == nil {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.awaitBridged(s, id, job, cancel, stopOnDrain)
		}()
	} else {
		cancel()
		stopOnDrain()
	}
	a := relayed(http.StatusOK, "application/json", appshape.Marshal(map[string]string{"event_id": id}))
	a.accepted = true
	return a, nil
}

// awaitBridged frees call id's slot when its Go job has ended (not when
// the caller was told: a cancelled call holds its slot until the replica
// let it go).
func (f *FrontDoor) awaitBridged(s *callerSession, id string, job *gradio.Job, cancel context.CancelFunc, stopOnDrain func() bool) {
	defer stopOnDrain()
	defer cancel()
	<-job.Done()
	job.Release()                            // its output is in the caller's messages (bridgeConv.event): out of the event budget
	_, err := job.Wait(context.Background()) // Done is closed: returns at once
	code := ""
	var ae *gradio.AppError
	switch {
	case err == nil:
	case errors.As(err, &ae):
		code = codeAppError
	case f.stopCalls.Err() != nil:
		code = codeShutdown
	case errors.Is(err, context.Canceled):
		code = codeClientClosed
	default:
		code = codeReplicaLost
		f.stats.lost.Add(1)
	}
	s.mu.Lock()
	pending := s.calls[id] != nil
	s.mu.Unlock()
	if pending {
		s.complete(id, code)
	}
}

// bridgeCallerFault answers a call refused for the caller's input.
func (f *FrontDoor) bridgeCallerFault(slot *pool.Slot, err error, status int, msg string) answer {
	slot.Done(gradio.JoinCallerFault, err)
	f.stats.callerFaults.Add(1)
	return detailOf(status, msg).ending(codeBadInput)
}

// bridgeConv turns one Go job's events into sse_v3 messages.
type bridgeConv struct {
	f      *FrontDoor
	br     *bridgeState
	id     string
	cfg    *gradio.Config
	dep    *gradio.Dependency
	idx    int    // the replica's number in file URLs
	gw     string // the gateway's root as the caller reached it
	pre    string // the API prefix the caller sees (callerPrefix)
	modern bool   // the caller sees Gradio 5 or later (presentedModern)
	start  time.Time
}

func secondsOrNil(d time.Duration) any {
	if d <= 0 {
		return nil
	}
	return d.Seconds()
}

// event is the job's EventHook: quick, no I/O (it queues a message).
func (c *bridgeConv) event(ev gradio.Event) {
	var msg map[string]any
	terminal := false
	b := c.br
	b.mu.Lock()
	defer b.mu.Unlock()
	j := b.jobs[c.id]
	if j == nil || j.ended {
		return // cancelled by the caller: it was told already
	}
	switch ev.Kind {
	case gradio.EventQueued:
		var rank, size any
		if ev.Rank >= 0 {
			rank = ev.Rank
		}
		if ev.QueueSize >= 0 {
			size = ev.QueueSize
		}
		msg = map[string]any{"msg": "estimation", "event_id": c.id, "rank": rank, "queue_size": size, "rank_eta": secondsOrNil(ev.ETA)}
	case gradio.EventStarted:
		msg = map[string]any{"msg": "process_starts", "event_id": c.id, "eta": secondsOrNil(ev.ETA)}
	case gradio.EventProgress:
		msg = map[string]any{"msg": "progress", "event_id": c.id, "progress_data": ev.Progress}
	case gradio.EventLog:
		msg = map[string]any{"msg": "log", "event_id": c.id, "log": ev.Log, "level": ev.Level, "title": ev.Title, "visible": true, "duration": nil}
	case gradio.EventOutput:
		data := c.outputs(ev.Data)
		if j.gens > 0 {
			// sse_v3 sends later generator outputs as diffs against the
			// previous one (the JS client applies them); a "replace" of
			// the whole value is a valid diff of any value.
			for i, v := range data {
				data[i] = appshape.Marshal([]any{[]any{"replace", []any{}, v}})
			}
		}
		j.gens++
		msg = map[string]any{"msg": "process_generating", "event_id": c.id, "output": c.output(data, true), "success": true, "time_limit": nil}
	case gradio.EventCompleted:
		terminal = true
		msg = map[string]any{"msg": "process_completed", "event_id": c.id, "output": c.output(c.outputs(ev.Data), false), "success": true, "title": nil}
	case gradio.EventError:
		terminal = true
		msg = c.errorMessage(ev.Err)
	default:
		return
	}
	if terminal {
		j.ended = true
		delete(b.jobs, c.id)
	}
	b.push(appshape.Marshal(msg))
}

func (c *bridgeConv) output(data []json.RawMessage, generating bool) map[string]any {
	return map[string]any{"data": data, "is_generating": generating, "duration": secondsOrNil(c.f.conf().Now().Sub(c.start)),
		"average_duration": nil, "render_config": nil, "changed_state_ids": []int{}}
}

// errorMessage is the process_completed of a failed call: gr.Error's
// message and title as Gradio 5 sends them, else the gateway's own text.
func (c *bridgeConv) errorMessage(err error) map[string]any {
	var ae *gradio.AppError
	if errors.As(err, &ae) {
		title := ae.Title
		if title == "" {
			title = "Error"
		}
		var text any = ae.Message
		if ae.Hidden {
			text = nil
		} else if !c.modern {
			text = gradio.PyRepr(ae.Message) // presented as Gradio 4.44 (see presentError)
		}
		return map[string]any{"msg": "process_completed", "event_id": c.id,
			"output":  map[string]any{"error": text, "duration": secondsOrNil(ae.Duration), "visible": ae.Visible, "title": title},
			"success": false, "title": title}
	}
	text := "gradiopool: the connection to the replica was lost while it ran this call; the call is not run again"
	switch {
	case c.f.stopCalls.Err() != nil:
		text = stoppedDetail
	case c.f.ctx.Err() != nil:
		text = "gradiopool: the gateway closed while this call ran"
	case c.f.conf().ShowReplicaErrors:
		text = "gradiopool: the call failed at the replica: " + err.Error()
	}
	return map[string]any{"msg": "process_completed", "event_id": c.id,
		"output":  map[string]any{"error": text, "visible": true, "title": "Error"},
		"success": false, "title": "Error"}
}

// outputs turns a Go job's outputs (State outputs dropped) into the
// caller's: one value per output component, null for State (as Gradio 5
// sends them), file outputs pointing at the gateway.
func (c *bridgeConv) outputs(in []json.RawMessage) []json.RawMessage {
	out := in
	nonState := 0
	for _, id := range c.dep.Outputs {
		if !c.cfg.IsState(id) {
			nonState++
		}
	}
	if nonState != len(c.dep.Outputs) && len(in) == nonState {
		out = make([]json.RawMessage, 0, len(c.dep.Outputs))
		k := 0
		for _, id := range c.dep.Outputs {
			if c.cfg.IsState(id) {
				out = append(out, json.RawMessage("null"))
				continue
			}
			out = append(out, in[k])
			k++
		}
	} else {
		out = slices.Clone(in)
	}
	for i, v := range out {
		out[i] = c.files(v)
	}
	return out
}

// files rewrites the FileData in v to gateway paths and URLs (the signed
// file= route), in Gradio 5's FileData shape: sse_v1 apps send url null,
// older ones fewer fields.
func (c *bridgeConv) files(v json.RawMessage) json.RawMessage {
	if c.cfg.Protocol == appshape.ProtocolWS {
		v = appshape.WSOutputFiles(v)
	}
	if !bytes.Contains(v, []byte(`"path"`)) {
		return v
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var x any
	if dec.Decode(&x) != nil {
		return v
	}
	changed := false
	var walk func(x any)
	walk = func(x any) {
		switch t := x.(type) {
		case []any:
			for _, e := range t {
				walk(e)
			}
		case map[string]any:
			p, ok := t["path"].(string)
			if ok && len(p) > 1 && p[0] == '/' && appshape.IsFileData(t) {
				vp := c.f.virtualPath(c.idx, p)
				t["path"] = vp
				t["url"] = c.gw + c.pre + "/file=" + vp
				if n, _ := t["orig_name"].(string); n == "" {
					t["orig_name"] = path.Base(p)
				}
				for k, def := range map[string]any{"size": nil, "mime_type": nil, "is_stream": false} {
					if _, ok := t[k]; !ok {
						t[k] = def
					}
				}
				t["meta"] = map[string]any{"_type": "gradio.FileData"}
				changed = true
				return
			}
			for _, e := range t {
				walk(e)
			}
		}
	}
	walk(x)
	if !changed {
		return v
	}
	return appshape.Marshal(x)
}

// bridgeConfig is GET /config when the reference replica is bridged: its
// config presented as Gradio 5's (appshape.AsGradio5), with the gateway's
// root and app_id.
func (f *FrontDoor) bridgeConfig(w http.ResponseWriter, r *http.Request, app *gradio.Client) {
	gw := f.root(r)
	out, err := appshape.AsGradio5(app.Config(), appshape.Presented{Version: bridgeVersion, APIPrefix: bridgePrefix, Root: gw, AppID: f.appID})
	if err != nil {
		detail(w, http.StatusBadGateway, "gradiopool: the replica's config is not a JSON object")
		return
	}
	relayed(http.StatusOK, "application/json", replaceRoots(out, appRoots(app), gw)).writeTo(w)
}
