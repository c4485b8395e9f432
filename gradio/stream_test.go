package gradio_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

const echoConfig = `{"version":"5.49.1","protocol":"sse_v3","api_prefix":"/gradio_api","app_id":42,
"components":[{"id":1,"type":"textbox"},{"id":2,"type":"textbox"}],
"dependencies":[{"id":0,"api_name":"echo","inputs":[1],"outputs":[2],"backend_fn":true,"types":{"generator":false}}]}`

// scriptedApp is a hand-driven sse_v3 server with one session: the test
// decides what goes onto the data stream and when.
type scriptedApp struct {
	msgs    chan string // records for the data stream; "CLOSE" ends it with close_stream
	written chan string // each record once written
	gets    atomic.Int32
	onJoin  func(id string) // runs before the join answers
}

func (a *scriptedApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/config":
		w.Write([]byte(echoConfig))
	case "/gradio_api/queue/join":
		var body struct{ Data []string }
		json.NewDecoder(r.Body).Decode(&body)
		id := "ev-" + body.Data[0]
		if a.onJoin != nil {
			a.onJoin(id)
		}
		fmt.Fprintf(w, `{"event_id":%q}`, id)
	case "/gradio_api/queue/data":
		a.gets.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for {
			select {
			case m := <-a.msgs:
				if m == "CLOSE" {
					m = `{"msg":"close_stream","event_id":null}`
				}
				fmt.Fprintf(w, "data: %s\n\n", m)
				w.(http.Flusher).Flush()
				a.written <- m
				if strings.Contains(m, "close_stream") {
					return
				}
			case <-r.Context().Done():
				return
			}
		}
	case "/gradio_api/cancel", "/gradio_api/reset":
		w.Write([]byte(`{"success":true}`))
	default:
		http.NotFound(w, r)
	}
}

func completed(id, out string) string {
	return fmt.Sprintf(`{"msg":"process_completed","event_id":%q,"output":{"data":[%q]},"success":true}`, id, out)
}

func TestStreamEarlyMessagesAndReopen(t *testing.T) {
	app := &scriptedApp{msgs: make(chan string, 100), written: make(chan string, 100)}
	app.onJoin = func(id string) {
		switch id {
		case "ev-hold":
			app.msgs <- `{"msg":"estimation","event_id":"ev-hold","rank":0,"queue_size":2,"rank_eta":null}`
		case "ev-early":
			// The whole event crosses the stream before its join answers.
			for _, m := range []string{
				`{"msg":"estimation","event_id":"ev-early","rank":1,"queue_size":2,"rank_eta":1.5}`,
				`{"msg":"process_starts","event_id":"ev-early","eta":null}`,
				completed("ev-early", "EARLY"),
			} {
				app.msgs <- m
			}
			for i := 0; i < 3; i++ {
				<-app.written
			}
		}
	}
	srv := httptest.NewServer(app)
	defer srv.Close()
	c := connect(t, srv.URL, gradio.WithHeartbeat(false))
	defer c.Close() // before srv.Close, which waits for the stream handler
	ctx := testCtx(t)

	hold, err := c.Submit(ctx, "echo", "hold")
	if err != nil {
		t.Fatal(err)
	}
	holdEvents := hold.Events()
	if ev := <-holdEvents; ev.Kind != gradio.EventQueued || ev.QueueSize != 2 {
		t.Fatalf("first hold event %+v", ev)
	}
	<-app.written
	early, err := c.Submit(ctx, "echo", "early")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for ev := range early.Events() {
		kinds = append(kinds, ev.Kind.String())
		if ev.Kind == gradio.EventQueued && (ev.Rank != 1 || ev.ETA != 1500*time.Millisecond) {
			t.Errorf("queued event %+v", ev)
		}
	}
	if got := strings.Join(kinds, ","); got != "queued,started,completed" {
		t.Fatalf("early events %s", got)
	}
	if out, err := early.Wait(ctx); err != nil || str(t, out[0]) != "EARLY" {
		t.Fatalf("early: %v", err)
	}
	// close_stream while hold is still pending: the client must reopen.
	app.msgs <- "CLOSE"
	app.msgs <- completed("ev-hold", "HOLD")
	for range holdEvents {
	}
	if out, err := hold.Wait(ctx); err != nil || str(t, out[0]) != "HOLD" {
		t.Fatalf("hold: %v", err)
	}
	if n := app.gets.Load(); n != 2 {
		t.Errorf("%d GET queue/data, want 2 (one reopen)", n)
	}
}

func TestUnexpectedErrorFailsAllPending(t *testing.T) {
	app := &scriptedApp{msgs: make(chan string, 100), written: make(chan string, 100)}
	srv := httptest.NewServer(app)
	defer srv.Close()
	c := connect(t, srv.URL)
	defer c.Close()
	ctx := testCtx(t)
	a, _ := c.Submit(ctx, "echo", "a")
	b, _ := c.Submit(ctx, "echo", "b")
	app.msgs <- `{"msg":"heartbeat","event_id":null}`
	app.msgs <- `{"msg":"unexpected_error","event_id":null,"message":"Server stopped unexpectedly.","success":false}`
	for _, j := range []*gradio.Job{a, b} {
		_, err := j.Wait(ctx)
		var cl *gradio.ConnectionLostError
		if !errors.As(err, &cl) || !cl.Accepted || !strings.Contains(err.Error(), "Server stopped") {
			t.Fatalf("err %v", err)
		}
	}
}

func TestRestartDuringCall(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, nil)
	c := connect(t, srv.URL)
	j, err := c.Submit(testCtx(t), "slow", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for ev := range j.Events() {
		if ev.Kind == gradio.EventStarted {
			srv.Restart()
		}
	}
	_, err = j.Wait(testCtx(t))
	var cl *gradio.ConnectionLostError
	if !errors.As(err, &cl) || !cl.Accepted {
		t.Fatalf("err %v", err)
	}
	if err := c.Ping(testCtx(t)); !errors.Is(err, gradio.ErrAppChanged) {
		t.Fatalf("Ping: %v", err)
	}
}

// TestJoinNotAccepted: a join a stalled app does not answer fails at the
// header time-out for a caller without a deadline; a caller whose deadline
// lies beyond it waits for the join's answer until then (an app slow to
// answer may still accept the call: it is not reported lost early), and
// then gets the "may have been accepted" outcome.
func TestJoinNotAccepted(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, nil)
	c := connect(t, srv.URL, gradio.WithHeaderTimeout(300*time.Millisecond))
	srv.SetStall(true)
	ctx, cancel := context.WithCancel(context.Background()) // no deadline
	_, err := c.Predict(ctx, "upper", "x")
	cancel()
	var cl *gradio.ConnectionLostError
	if !errors.As(err, &cl) || cl.Accepted {
		t.Fatalf("no deadline: err %v, want not accepted", err)
	}
	dctx, dcancel := context.WithTimeout(testCtx(t), time.Second)
	_, err = c.Predict(dctx, "upper", "x")
	dcancel()
	srv.SetStall(false)
	// At the deadline the caller's wait and the join's own request end
	// together: either reports the may-have-been-accepted outcome.
	if !errors.Is(err, context.DeadlineExceeded) ||
		!errors.Is(err, gradio.ErrMaybeAccepted) && !(errors.As(err, &cl) && cl.MaybeAccepted && !cl.Accepted) {
		t.Fatalf("a deadline past the header time-out: err %v, want the join awaited until the deadline (may have been accepted)", err)
	}
}

func TestUnsupportedProtocol(t *testing.T) {
	for _, cfg := range []string{
		`{"version":"7.0.0","protocol":"sse_v9","dependencies":[]}`,
		`{"allow_flagging":"never","dependencies":[]}`, // Gradio 2.x
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(cfg)) }))
		_, err := gradio.Connect(testCtx(t), srv.URL)
		srv.Close()
		if !errors.Is(err, gradio.ErrUnsupportedProtocol) {
			t.Fatalf("config %s: err %v", cfg, err)
		}
	}
}

func TestHeartbeatOption(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, nil)
	for _, tt := range []struct {
		opts []gradio.Option
		want int
	}{{nil, 1}, {[]gradio.Option{gradio.WithHeartbeat(false)}, 0}} {
		var px countingProxy
		c := connect(t, px.start(t, srv.URL), tt.opts...)
		if _, err := c.Predict(testCtx(t), "upper", "x"); err != nil {
			t.Fatal(err)
		}
		heartbeats := func() int {
			n := 0
			for k, v := range px.snapshot() {
				if strings.Contains(k, "/heartbeat/") {
					n += v
				}
			}
			return n
		}
		if tt.want > 0 {
			// Its own goroutine sends it: it may arrive after the answer.
			waitFor(t, func() bool { return heartbeats() >= tt.want })
		}
		c.Close()
		if n := heartbeats(); n != tt.want {
			t.Errorf("opts %v: %d heartbeat streams, want %d", tt.opts, n, tt.want)
		}
	}
}

func TestSubPathMount(t *testing.T) {
	sim := startSim(t, gradiotest.Gradio4SSEv3, nil, nil) // no api_prefix: Python's urljoin pitfall
	u, _ := url.Parse(sim.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.Transport = proxyTransport(t)
	mux := http.NewServeMux()
	mux.Handle("/apps/demo/", http.StripPrefix("/apps/demo", rp))
	front := httptest.NewServer(mux)
	defer front.Close()
	c := connect(t, front.URL+"/apps/demo/?__theme=dark")
	defer c.Close()
	if c.BaseURL() != front.URL+"/apps/demo" {
		t.Fatalf("base %q", c.BaseURL())
	}
	out, err := c.Predict(testCtx(t), "upper", "mounted")
	if err != nil || str(t, out[0]) != "MOUNTED" {
		t.Fatalf("%s %v", out, err)
	}
}

func TestOAuthToken(t *testing.T) {
	cfg := `{"version":"6.25.0","protocol":"sse_v3","api_prefix":"/gradio_api","app_id":1,
"components":[{"id":1,"type":"textbox"},{"id":2,"type":"textbox"}],
"dependencies":[{"id":0,"api_name":"me","inputs":[1],"outputs":[2],"backend_fn":true},
{"id":1,"api_name":"plain","inputs":[1],"outputs":[2],"backend_fn":true}]}`
	info := `{"named_endpoints":{"/me":{"parameters":[{"label":"x","parameter_name":"x","parameter_has_default":false}],"returns":[],"oauth_token":"required"},
"/plain":{"parameters":[{"label":"x","parameter_name":"x","parameter_has_default":false}],"returns":[]}},"unnamed_endpoints":{}}`
	var mu sync.Mutex
	tokens := map[string]any{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/config":
			io.WriteString(w, cfg)
		case "/gradio_api/info":
			io.WriteString(w, info)
		case "/gradio_api/queue/join":
			var b map[string]any
			json.NewDecoder(r.Body).Decode(&b)
			mu.Lock()
			tokens[fmt.Sprint(b["fn_index"])] = b["oauth_token"]
			mu.Unlock()
			fmt.Fprintf(w, `{"event_id":"e%v"}`, b["fn_index"])
		case "/gradio_api/queue/data":
			w.Header().Set("Content-Type", "text/event-stream")
			for _, id := range []string{"e0", "e1"} {
				fmt.Fprintf(w, "data: %s\n\n", completed(id, "ok"))
			}
			io.WriteString(w, "data: {\"msg\":\"close_stream\",\"event_id\":null}\n\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := connect(t, srv.URL, gradio.WithOAuthToken("oauth-tok"))
	defer c.Close()
	for _, ep := range []string{"me", "plain"} {
		if _, err := c.Predict(testCtx(t), ep, "x"); err != nil {
			t.Fatalf("%s: %v", ep, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if tokens["0"] != "oauth-tok" || tokens["1"] != nil {
		t.Fatalf("oauth tokens sent: %v", tokens)
	}
}

// TestStreamOpenedAheadOfJoin checks that on a known session the data
// stream is opened while the join is still in flight (one round trip less
// per call), and that a server which forgets sessions between calls still
// works (the client then stops doing it).
func TestStreamOpenedAheadOfJoin(t *testing.T) {
	for _, forget := range []bool{false, true} {
		t.Run(fmt.Sprint("forget=", forget), func(t *testing.T) {
			var mu sync.Mutex
			known := false
			gets := make(chan struct{}, 10)
			msgs := make(chan string, 10)
			preopened := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/config":
					io.WriteString(w, echoConfig)
				case "/gradio_api/queue/join":
					var b struct{ Data []string }
					json.NewDecoder(r.Body).Decode(&b)
					mu.Lock()
					wasKnown := known
					mu.Unlock()
					if wasKnown && !forget {
						select {
						case <-gets: // the stream arrived before we answer
							mu.Lock()
							preopened++
							mu.Unlock()
						case <-time.After(2 * time.Second):
						}
					}
					mu.Lock() // the session and its event exist together
					known = true
					msgs <- completed("ev-"+b.Data[0], strings.ToUpper(b.Data[0]))
					mu.Unlock()
					fmt.Fprintf(w, `{"event_id":"ev-%s"}`, b.Data[0])
				case "/gradio_api/queue/data":
					w.Header().Set("Content-Type", "text/event-stream")
					// Checked and forgotten under one lock: a join between
					// the two would otherwise have its session forgotten
					// right after it was created, which no server does.
					mu.Lock()
					notFound := !known || forget && len(msgs) == 0
					if notFound && forget {
						known = false
					}
					mu.Unlock()
					if notFound {
						io.WriteString(w, "data: {\"msg\":\"unexpected_error\",\"event_id\":null,\"message\":\"404: Not Found\",\"session_not_found\":true,\"success\":false}\n\n")
						return
					}
					gets <- struct{}{}
					w.(http.Flusher).Flush()
					select {
					case m := <-msgs:
						fmt.Fprintf(w, "data: %s\n\ndata: {\"msg\":\"close_stream\",\"event_id\":null}\n\n", m)
					case <-r.Context().Done():
					}
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			c := connect(t, srv.URL)
			defer c.Close()
			for _, in := range []string{"a", "b", "c"} {
				out, err := c.Predict(testCtx(t), "echo", in)
				if err != nil || str(t, out[0]) != strings.ToUpper(in) {
					t.Fatalf("%s: %s %v", in, out, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if !forget && preopened != 2 {
				t.Errorf("stream opened ahead of %d joins, want 2", preopened)
			}
		})
	}
}
