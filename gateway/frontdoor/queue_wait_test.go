package frontdoor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// stateApp is fdtest.SpreadApp with hold_state, an endpoint with gr.State that
// holds until gate closes and keeps the session's inputs in its state.
func stateApp(gate chan struct{}) *gradiotest.App {
	app := fdtest.SpreadApp(gate)
	app.Handle("hold_state", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		s, _ := c.String(0)
		var items []string
		if len(c.Inputs) > 1 && string(c.Inputs[1]) != "null" {
			if err := c.Decode(1, &items); err != nil {
				return nil, err
			}
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		items = append(items, s)
		return []any{"held " + strings.Join(items, ","), items}, nil
	}, []gradiotest.Component{gradiotest.Textbox("in"), gradiotest.State([]any{})},
		[]gradiotest.Component{gradiotest.Textbox("out"), gradiotest.State(nil)})
	return app
}

// leaveAfterEstimation opens session's stream, checks that its first
// bytes carry the estimation of call id (it waits in the gateway's
// queue), and goes away.
func leaveAfterEstimation(t *testing.T, base, session, id string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/gradio_api/queue/data?session_hash="+session, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	if !strings.Contains(string(buf[:n]), id) {
		t.Errorf("first bytes of the stream %q, want the estimation of %s", buf[:n], id)
	}
}

// joinSoon is fdtest.Join, failing the test when the join is not answered
// within a minute (a hang guard: a join that waits for its slot before
// it is answered would hang the test until the gate opens).
func joinSoon(t *testing.T, base, session string, fn int, data ...any) string {
	t.Helper()
	type res struct {
		id  string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		id, err := fdtest.Join(base, session, fn, data...)
		ch <- res{id, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.id
	case <-time.After(time.Minute):
		t.Fatalf("join of %s %v not answered while it waits", session, data)
	}
	return ""
}

// TestFrontDoorQueueSessionJoins: joins of one session to an endpoint with
// gr.State, which run one after the other on the session's replica, are
// all answered at once while every slot is taken, and each is shown its
// own place: the later one behind the earlier one. Both then run, in
// order, with the session's state.
func TestFrontDoorQueueSessionJoins(t *testing.T) {
	gate := make(chan struct{})
	srv, fd, _, _, _ := newDoorApps(t, []*gradiotest.App{stateApp(gate)}, func(c *config) {
		c.Pool.MaxConnections = 1
	})
	base := srv.URL
	hold, holdState := fdtest.FnIndex(t, base, "hold"), fdtest.FnIndex(t, base, "hold_state")
	occ := joinSoon(t, base, "occupier", hold, "o")
	occStream := fdtest.Messages(t, base, "occupier")
	nextMsg(t, occStream, "process_starts", occ)

	first := joinSoon(t, base, "stateful", holdState, "a", nil)
	stream := fdtest.Messages(t, base, "stateful")
	if est := nextMsg(t, stream, "estimation", first); est["rank"] != float64(0) {
		t.Errorf("first join: %v, want rank 0", est)
	}
	second := joinSoon(t, base, "stateful", holdState, "b", nil)
	if est := nextMsg(t, stream, "estimation", second); est["rank"] != float64(1) || est["queue_size"] != float64(2) {
		t.Errorf("second join of the session: %v, want rank 1 of 2 (behind the first)", est)
	}
	close(gate)
	nextMsg(t, occStream, "process_completed", occ)
	for i, id := range []string{first, second} {
		done := nextMsg(t, stream, "process_completed", id)
		want := []string{"held a", "held a,b"}[i]
		if done["success"] != true || !strings.Contains(fmt.Sprint(done["output"]), want) {
			t.Errorf("join %d ended %v, want %q", i, done, want)
		}
	}
	if st := fd.Stats(); st.Queued != 2 {
		t.Errorf("front door stats: %d joins queued, want 2", st.Queued)
	}
}

// jsCallLine is a line of queue_status_many.mjs.
type jsCallLine struct {
	Call   int              `json:"call"`
	Status *fdtest.JSStatus `json:"status"`
	Data   []any            `json:"data"`
}

// TestFrontDoorQueueJSClientSession: one official JS client of a
// signed-in user (sticky sessions on) makes three calls to an endpoint
// with gr.State while every slot is taken: the first waits for a slot,
// the others for the session's replica behind it. The client shows each
// call pending in the queue at its own place (0 of 1, 1 of 2, 2 of 3),
// and all three then run in order on the session's state.
func TestFrontDoorQueueJSClientSession(t *testing.T) {
	fdtest.NodeOrSkip(t) // before any replica starts
	gate := make(chan struct{})
	var closeGate sync.Once
	t.Cleanup(func() { closeGate.Do(func() { close(gate) }) })
	srv, _, _, _, _ := newDoorApps(t, []*gradiotest.App{stateApp(gate)}, func(c *config) {
		c.Pool.MaxConnections = 1
		c.Pool.StickySessions = true
	})
	base := srv.URL
	joinSoon(t, base, "occupier", fdtest.FnIndex(t, base, "hold"), "o")
	firstShown := map[int]*fdtest.JSStatus{}
	data := map[int][]any{}
	out := fdtest.NodeLive(t, time.Minute, func(b []byte) {
		var l jsCallLine
		if json.Unmarshal(b, &l) != nil {
			return
		}
		if l.Data != nil {
			data[l.Call] = l.Data
		}
		if l.Status == nil || l.Status.Position == nil || firstShown[l.Call] != nil {
			return
		}
		firstShown[l.Call] = l.Status
		if l.Call == 2 { // every call shown: the slot may free
			closeGate.Do(func() { close(gate) })
		}
	}, "queue_status_many.mjs", "--user=ann@example.org", base+"/", "/hold_state", "a", "b", "c")
	for i := range 3 {
		s := firstShown[i]
		if s == nil || s.Stage != "pending" || !s.Queue || *s.Position != i || s.Size == nil || *s.Size != i+1 {
			t.Errorf("call %d: first status with a place %+v, want pending in the queue at %d of %d", i, s, i, i+1)
		}
		want := "held " + strings.Join([]string{"a", "b", "c"}[:i+1], ",")
		if len(data[i]) == 0 || data[i][0] != want {
			t.Errorf("call %d returned %v, want %q first", i, data[i], want)
		}
	}
	if t.Failed() {
		t.Logf("the JS client printed:\n%s", out)
	}
}

// heldConfig puts a proxy in front of the replica at target that holds
// every GET of its config until release closes: a replica whose /config
// answers slowly, so that the gateway's first joins come before any
// replica is connected. It returns the proxy's URL.
func heldConfig(t *testing.T, target string, release <-chan struct{}) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // event streams pass at once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/config") {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// TestFrontDoorQueueBeforeFirstReplica: joins that come before any
// replica is connected (its /config is slow) are answered at once with
// the gateway's event id and shown their place among the joins waiting
// for the app; once the replica connects they run. A join of a function
// the app turns out not to have ends on its stream with success false
// and the gateway's message.
func TestFrontDoorQueueBeforeFirstReplica(t *testing.T) {
	gate := make(chan struct{})
	close(gate) // the calls run through once they have a replica
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	srv, _, sims, _, _ := newDoorApps(t, []*gradiotest.App{fdtest.SpreadApp(gate)}, func(c *config) {
		c.Pool.MaxConnections = 1
		c.Pool.Replicas[0] = heldConfig(t, c.Pool.Replicas[0], release)
	})
	base := srv.URL
	hold := fdtest.FnIndex(t, sims[0].URL, "hold") // the replica's own: the gateway's /config waits for it
	ids := make([]string, 2)
	streams := make([]<-chan map[string]any, 2)
	for i := range ids {
		sess := fmt.Sprintf("early%d", i)
		ids[i] = joinSoon(t, base, sess, hold, sess)
		streams[i] = fdtest.Messages(t, base, sess)
		est := nextMsg(t, streams[i], "estimation", ids[i])
		if est["rank"] != float64(i) || est["queue_size"] != float64(i+1) || est["rank_eta"] != nil {
			t.Errorf("early join %d: %v, want rank %d of %d and no ETA", i, est, i, i+1)
		}
	}
	unknown := joinSoon(t, base, "unknown", 999, "x")
	unknownStream := fdtest.Messages(t, base, "unknown")
	nextMsg(t, unknownStream, "estimation", unknown)
	releaseOnce.Do(func() { close(release) })
	for i, id := range ids {
		done := nextMsg(t, streams[i], "process_completed", id)
		if want := fmt.Sprintf("held early%d", i); done["success"] != true || !strings.Contains(fmt.Sprint(done["output"]), want) {
			t.Errorf("early join %d ended %v, want %q", i, done, want)
		}
		nextMsg(t, streams[i], "close_stream", "")
	}
	done := nextMsg(t, unknownStream, "process_completed", unknown)
	out, _ := done["output"].(map[string]any)
	if msg, _ := out["error"].(string); done["success"] != false || !strings.Contains(msg, "fn_index") {
		t.Errorf("join of an unknown function ended %v, want success false and the gateway's message", done)
	}
}

// TestFrontDoorQueueBridged: over Gradio 4.0-4.21 replicas (bridged: the
// gateway runs each call with the Go client and owns its event ids), a
// join that must wait for a slot is answered at once and shown its place;
// the call then runs under that same event id. The official JS client
// shows it pending in the queue at position 0 of 1.
func TestFrontDoorQueueBridged(t *testing.T) {
	gate := make(chan struct{})
	srv, fd, _ := newDoorMode(t, gradiotest.Gradio4SSEv1, []*gradiotest.App{fdtest.SpreadApp(gate)}, func(c *config) {
		c.Pool.MaxConnections = 1
	})
	base := srv.URL
	hold := fdtest.FnIndex(t, base, "hold")
	occ := joinSoon(t, base, "occupier", hold, "o")
	occStream := fdtest.Messages(t, base, "occupier")
	nextMsg(t, occStream, "process_starts", occ)
	id := joinSoon(t, base, "waiter", hold, "w")
	stream := fdtest.Messages(t, base, "waiter")
	if est := nextMsg(t, stream, "estimation", id); est["rank"] != float64(0) || est["queue_size"] != float64(1) {
		t.Errorf("bridged join waiting for a slot: %v, want rank 0 of 1", est)
	}
	close(gate)
	nextMsg(t, occStream, "process_completed", occ)
	nextMsg(t, stream, "process_starts", id)
	if done := nextMsg(t, stream, "process_completed", id); done["success"] != true || !strings.Contains(fmt.Sprint(done["output"]), "held w") {
		t.Errorf("bridged waiter ended %v", done)
	}
	nextMsg(t, stream, "close_stream", "")
	if st := fd.Stats(); st.Queued != 1 {
		t.Errorf("front door stats: %d joins queued, want 1", st.Queued)
	}
}

// TestFrontDoorQueueBridgedJSClient: the JS client's view of a bridged
// call waiting in the gateway's queue, and of its time-out.
func TestFrontDoorQueueBridgedJSClient(t *testing.T) {
	fdtest.NodeOrSkip(t)
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	srv, _, _ := newDoorMode(t, gradiotest.Gradio4SSEv1, []*gradiotest.App{fdtest.SpreadApp(gate)}, func(c *config) {
		c.Pool.MaxConnections = 1
		c.Pool.QueueTimeout = 2 * time.Second
	})
	base := srv.URL
	joinSoon(t, base, "occupier", fdtest.FnIndex(t, base, "hold"), "o")
	out := fdtest.NodeOutput(t, time.Minute, "queue_status.mjs", base+"/", "/hold", "js")
	queued, last := fdtest.JSQueueStatuses(out)
	if queued == nil || !queued.Queue || *queued.Position != 0 || queued.Size == nil || *queued.Size != 1 {
		t.Errorf("no pending status with queue, position 0 of 1; the JS client printed:\n%s", out)
	}
	if last == nil || last.Stage != "error" || !strings.Contains(last.Message, "gradiopool: all 1 replicas are busy; waited") {
		t.Errorf("the call did not end with the gateway's busy message; the JS client printed:\n%s", out)
	}
}

// TestFrontDoorQueueBeforeFirstReplicaJSClient: the official JS client,
// holding a config from a gateway that is up (another instance, or one
// from before a restart), calls a gateway whose replica has not connected
// yet: it shows its call pending in the queue at position 0 of 1 until
// the replica connects, then gets its result.
func TestFrontDoorQueueBeforeFirstReplicaJSClient(t *testing.T) {
	fdtest.NodeOrSkip(t)
	gate := make(chan struct{})
	close(gate)
	warm, _, sims, _, _ := newDoorApps(t, []*gradiotest.App{fdtest.SpreadApp(gate)}, nil)
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	cold, _, _, _, _ := newDoorApps(t, []*gradiotest.App{fdtest.SpreadApp(gate)}, func(c *config) {
		c.Pool.Replicas[0] = heldConfig(t, sims[0].URL, release)
	})
	// The client reaches one address: its config comes from the warm
	// gateway, everything else goes to the cold one.
	proxyTo := func(base string) *httputil.ReverseProxy {
		u, _ := url.Parse(base)
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.FlushInterval = -1
		return rp
	}
	warmRP, coldRP := proxyTo(warm.URL), proxyTo(cold.URL)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/config") || strings.HasSuffix(r.URL.Path, "/info") {
			warmRP.ServeHTTP(w, r)
			return
		}
		coldRP.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		front.CloseClientConnections()
		front.Close()
	})
	var shown *fdtest.JSStatus
	var data []any
	out := fdtest.NodeLive(t, time.Minute, func(b []byte) {
		var l jsCallLine
		if json.Unmarshal(b, &l) != nil {
			return
		}
		if l.Data != nil {
			data = l.Data
		}
		if l.Status != nil && l.Status.Position != nil && shown == nil {
			shown = l.Status
			releaseOnce.Do(func() { close(release) }) // the replica connects now
		}
	}, "queue_status_many.mjs", front.URL+"/", "/hold", "early")
	if shown == nil || shown.Stage != "pending" || !shown.Queue || *shown.Position != 0 || shown.Size == nil || *shown.Size != 1 {
		t.Errorf("first status with a place %+v, want pending in the queue at 0 of 1", shown)
	}
	if len(data) == 0 || data[0] != "held early" {
		t.Errorf("the call returned %v, want \"held early\"", data)
	}
	if t.Failed() {
		t.Logf("the JS client printed:\n%s", out)
	}
}

// TestFrontDoorQueueNoReplicaYetTimesOut: a join shown waiting for the
// first replica, which never connects, ends at queue_timeout on its
// caller's stream with success false and the gateway's message; the
// front door holds nothing for it after.
func TestFrontDoorQueueNoReplicaYetTimesOut(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv, fd, sims, _, _ := newDoorApps(t, []*gradiotest.App{fdtest.SpreadApp(make(chan struct{}))}, func(c *config) {
		c.Pool.QueueTimeout = 3 * time.Second // past the grace before a join is told it waits
		c.Pool.Replicas[0] = heldConfig(t, c.Pool.Replicas[0], release)
	})
	base := srv.URL
	id := joinSoon(t, base, "stranded", fdtest.FnIndex(t, sims[0].URL, "hold"), "s")
	ch := fdtest.Messages(t, base, "stranded")
	nextMsg(t, ch, "estimation", id)
	done := nextMsg(t, ch, "process_completed", id)
	out, _ := done["output"].(map[string]any)
	if msg, _ := out["error"].(string); done["success"] != false || !strings.Contains(msg, "gradiopool: no replica can take the call") {
		t.Errorf("process_completed %v, want success false and the gateway's message", done)
	}
	nextMsg(t, ch, "close_stream", "")
	fdtest.WaitFor(t, "the stranded call is gone", func() bool { return fd.CallsInFlight() == 0 })
}

// TestFrontDoorQueueNoReplicaYetCallerGoes: a caller whose stream closes
// while its join waits for the first replica leaves the wait: the front
// door holds nothing for it, and once the replica connects it never gets
// the call.
func TestFrontDoorQueueNoReplicaYetCallerGoes(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	gate := make(chan struct{})
	close(gate)
	srv, fd, sims, _, _ := newDoorApps(t, []*gradiotest.App{fdtest.SpreadApp(gate)}, func(c *config) {
		c.Pool.Replicas[0] = heldConfig(t, c.Pool.Replicas[0], release)
	})
	base := srv.URL
	hold := fdtest.FnIndex(t, sims[0].URL, "hold")
	id := joinSoon(t, base, "leaver", hold, "gone")
	leaveAfterEstimation(t, base, "leaver", id)
	fdtest.WaitFor(t, "the gone caller's call left the wait", func() bool { return fd.CallsInFlight() == 0 })
	releaseOnce.Do(func() { close(release) })
	if got := fdtest.Call(t, base, "after", hold, "a"); got != "held a" {
		t.Fatalf("a call once the replica connected: %q", got)
	}
	if n := sims[0].Executions("hold"); n != 1 {
		t.Errorf("hold ran %d times, want only the later caller's", n)
	}
}

// TestFrontDoorQueueBridgedCancelWhileJoining: a bridged call that waited
// in the gateway's queue (its caller holds the gateway's event id) is
// cancelled just as its slot came and its join is on the way to the
// replica. The cancel must end it for the caller (a process_completed,
// never a process_starts after it) and stop it at the replica: before,
// the cancel only ended the wait that was already over, the join went
// on, and the call ran as if never cancelled (behind a long call, the
// caller's stream waited for it: the JS client's cancel/queued_job hang).
func TestFrontDoorQueueBridgedCancelWhileJoining(t *testing.T) {
	gate := make(chan struct{})
	sim := gradiotest.NewUnstartedServer(fdtest.SpreadApp(gate))
	sim.Mode = gradiotest.Gradio4SSEv1
	sim.Start()
	t.Cleanup(sim.Close)
	// The waiter's join is held at the replica's door until the test has
	// cancelled it.
	var holdJoins sync.Once
	joinArrived, releaseJoin := make(chan struct{}), make(chan struct{})
	armed := make(chan struct{})
	u, _ := url.Parse(sim.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	door := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/queue/join") {
			select {
			case <-armed:
				holdJoins.Do(func() {
					close(joinArrived)
					<-releaseJoin
				})
			default:
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(door.Close)
	t.Cleanup(func() {
		select {
		case <-releaseJoin:
		default:
			close(releaseJoin)
		}
	})
	srv, _, _ := newDoorOver(t, []string{door.URL}, func(c *config) { c.Pool.MaxConnections = 1 })
	base := srv.URL
	hold := fdtest.FnIndex(t, base, "hold")
	occ := joinSoon(t, base, "occupier", hold, "o")
	occStream := fdtest.Messages(t, base, "occupier")
	nextMsg(t, occStream, "process_starts", occ)
	id := joinSoon(t, base, "waiter", hold, "w")
	stream := fdtest.Messages(t, base, "waiter")
	nextMsg(t, stream, "estimation", id)
	close(armed)
	close(gate) // the occupier ends: the waiter gets the slot and joins
	nextMsg(t, occStream, "process_completed", occ)
	select {
	case <-joinArrived:
	case <-time.After(time.Minute):
		t.Fatal("the waiter's join never reached the replica")
	}
	resp, err := http.Post(base+"/gradio_api/cancel", "application/json",
		strings.NewReader(fmt.Sprintf(`{"session_hash":"waiter","event_id":%q,"fn_index":%d}`, id, hold)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	close(releaseJoin)
	for range 200 {
		var m map[string]any
		select {
		case got, ok := <-stream:
			if !ok {
				t.Fatal("the waiter's stream ended without its call's process_completed")
			}
			m = got
		case <-time.After(time.Minute):
			t.Fatal("no process_completed of the cancelled call within a minute")
		}
		if m["event_id"] != id {
			continue
		}
		switch m["msg"] {
		case "process_starts", "process_generating":
			t.Fatalf("the cancelled call ran for its caller: %v", m)
		case "process_completed":
			return
		}
	}
	t.Fatal("no process_completed of the cancelled call in 200 messages")
}
