package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
	"github.com/gradiopool/gradiopool/pool"
)

// drainGateway serves a gateway with the front door over one replica of
// app on a loopback listener; drain starts the drain, served reports
// Serve's end.
func drainGateway(t *testing.T, app *gradiotest.App, drainTimeout time.Duration) (url string, sim *gradiotest.Server, logs *logbuf.Buffer, drain func(), served <-chan struct{}) {
	t.Helper()
	return drainGatewayMode(t, gradiotest.Gradio5, app, drainTimeout)
}

// drainGatewayMode is drainGateway over a replica of one Gradio generation.
func drainGatewayMode(t *testing.T, mode gradiotest.Mode, app *gradiotest.App, drainTimeout time.Duration) (url string, sim *gradiotest.Server, logs *logbuf.Buffer, drain func(), served <-chan struct{}) {
	t.Helper()
	sim = gradiotest.NewUnstartedServer(app)
	sim.Mode = mode
	sim.Start()
	t.Cleanup(sim.Close)
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{sim.URL}, MinConnections: 1, MaxConnections: 4}, DrainTimeout: drainTimeout}
	logs = &logbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(logger, metrics))
	if err != nil {
		t.Fatal(err)
	}
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	g := gateway.New(cfg, b, logger, metrics)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Serve(ctx, ln); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return")
		}
		_ = g.Close(context.Background())
		_ = p.Close(context.Background())
	})
	return "http://" + ln.Addr().String(), sim, logs, cancel, done
}

// drainStream is a front-door caller: its join and its queue/data stream,
// read in the background.
type drainStream struct {
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func (s *drainStream) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// openFront joins fn_index fn for session hash and opens its stream, as
// the JS client does.
func openFront(t *testing.T, url, hash string, fn int) *drainStream {
	t.Helper()
	resp, err := http.Post(url+"/gradio_api/queue/join", "application/json",
		strings.NewReader(fmt.Sprintf(`{"data":["x"],"fn_index":%d,"session_hash":%q,"event_data":null,"trigger_id":null}`, fn, hash)))
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		EventID string `json:"event_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&j)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || j.EventID == "" {
		t.Fatalf("join: %d %v", resp.StatusCode, err)
	}
	data, err := http.Get(url + "/gradio_api/queue/data?session_hash=" + hash)
	if err != nil {
		t.Fatal(err)
	}
	s := &drainStream{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer data.Body.Close()
		sc := bufio.NewScanner(data.Body)
		for sc.Scan() {
			s.mu.Lock()
			s.lines = append(s.lines, sc.Text())
			s.mu.Unlock()
		}
	}()
	return s
}

// completed returns the stream's process_completed message, if any.
func (s *drainStream) completed() map[string]any {
	for _, line := range strings.Split(s.text(), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"process_completed"`) {
			var m map[string]any
			_ = json.Unmarshal([]byte(d), &m)
			return m
		}
	}
	return nil
}

// TestDrainWaitsForFrontDoorCalls: a front-door call in flight counts for
// the drain: /readyz turns 503 at once, a join during the drain gets
// Gradio's 503 shape with the draining message, and Serve waits until
// the call has completed (success) before it returns.
func TestDrainWaitsForFrontDoorCalls(t *testing.T) {
	release := make(chan struct{})
	url, sim, logs, drain, served := drainGateway(t, fdtest.HoldApp(release), time.Minute)
	fn := fdtest.FnIndex(t, url, "hold")
	call := openFront(t, url, "drain1", fn)
	fdtest.WaitFor(t, "the call to run on the replica", func() bool { return sim.Snapshot().Running == 1 })
	drain()
	fdtest.WaitFor(t, "readyz 503", func() bool { return do(t, "GET", url+"/readyz", "").status == 503 })
	a := do(t, "POST", url+"/gradio_api/queue/join", fmt.Sprintf(`{"data":["y"],"fn_index":%d,"session_hash":"drain2","event_data":null,"trigger_id":null}`, fn))
	var d struct {
		Detail string `json:"detail"`
	}
	if a.status != 503 || json.Unmarshal([]byte(a.body), &d) != nil || !strings.Contains(d.Detail, "restarting") {
		t.Fatalf("join during the drain: %d %s, want 503 {\"detail\": \"... restarting ...\"}", a.status, a.body)
	}
	// The line follows the switch to draining that /readyz shows.
	fdtest.WaitFor(t, "the drain's log line counting the front-door call", func() bool {
		return strings.Contains(logs.String(), `"msg":"draining","in_flight":1`)
	})
	select {
	case <-served:
		t.Fatal("Serve returned while a front-door call ran")
	default:
	}
	close(release)
	<-call.done
	if m := call.completed(); m == nil || m["success"] != true {
		t.Fatalf("the call did not complete: %s", call.text())
	}
	select {
	case <-served:
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after the last call ended")
	}
	if n := sim.Executions("hold"); n != 1 {
		t.Errorf("hold ran %d times", n)
	}
}

// TestDrainTimeoutEndsFrontDoorCalls: a front-door call still running at
// drain_timeout ends with process_completed success false and a message
// saying the gateway is restarting, then close_stream (never a silent
// close); the replica's call is cancelled, not run again.
func TestDrainTimeoutEndsFrontDoorCalls(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	url, sim, _, drain, served := drainGateway(t, fdtest.HoldApp(release), 300*time.Millisecond)
	fn := fdtest.FnIndex(t, url, "hold")
	call := openFront(t, url, "drain3", fn)
	fdtest.WaitFor(t, "the call to run on the replica", func() bool { return sim.Snapshot().Running == 1 })
	drain()
	select {
	case <-call.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream was not ended after drain_timeout")
	}
	m := call.completed()
	out, _ := m["output"].(map[string]any)
	if m == nil || m["success"] != false || !strings.Contains(fmt.Sprint(out["error"]), "restarting") {
		t.Fatalf("stream after drain_timeout:\n%s", call.text())
	}
	if !strings.HasSuffix(strings.TrimSpace(call.text()), `data: {"msg":"close_stream","event_id":null}`) {
		t.Errorf("the stream does not end with close_stream:\n%s", call.text())
	}
	<-served
	fdtest.WaitFor(t, "the replica's call cancelled", func() bool { return sim.Snapshot().Running == 0 })
	if n := sim.Executions("hold"); n != 1 {
		t.Errorf("hold ran %d times", n)
	}
}

// jsDrainCall runs testdata/jsclient/drain_call.mjs (the official JS
// client) against url: connected is closed once it connected, result
// receives its call's outcome.
func jsDrainCall(t *testing.T, url, endpoint string) (connected <-chan struct{}, result <-chan map[string]any) {
	t.Helper()
	node, dir := fdtest.NodeOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	cmd := exec.CommandContext(ctx, node, "drain_call.mjs", url, endpoint)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conn := make(chan struct{})
	res := make(chan map[string]any, 1)
	go func() {
		defer cancel()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			if m["connected"] == true {
				close(conn)
				continue
			}
			res <- m
		}
		_ = cmd.Wait()
		close(res)
	}()
	t.Cleanup(func() {
		cancel()
		if t.Failed() {
			t.Logf("drain_call.mjs stderr:\n%s", stderr.String())
		}
	})
	return conn, res
}

// TestDrainJSClient: the official JS client through a draining gateway. A
// call running when the drain starts completes; a call still running at
// drain_timeout settles with the gateway's "restarting" error (it never
// hangs); a call started during the drain is refused with the draining
// message.
func TestDrainJSClient(t *testing.T) {
	fdtest.NodeOrSkip(t)
	wait := func(what string, ch <-chan map[string]any) map[string]any {
		t.Helper()
		select {
		case m := <-ch:
			return m
		case <-time.After(90 * time.Second):
			t.Fatalf("%s: the JS call did not settle", what)
		}
		return nil
	}
	t.Run("finishes", func(t *testing.T) {
		release := make(chan struct{})
		url, sim, _, drain, served := drainGateway(t, fdtest.HoldApp(release), time.Minute)
		conn, res := jsDrainCall(t, url, "/hold")
		<-conn
		// The client's stream is open (the front door opened the replica's):
		// a stream opened just as the drain starts may meet a kept-alive
		// connection the drain closes (see the README).
		fdtest.WaitFor(t, "the call to run and its stream to open", func() bool {
			return sim.Snapshot().Running == 1 && sim.Requests("queue/data") > 0
		})
		drain()
		fdtest.WaitFor(t, "readyz 503", func() bool { return do(t, "GET", url+"/readyz", "").status == 503 })
		lconn, late := jsDrainCall(t, url, "/hold")
		<-lconn
		// The JS client shows its own text for any 503 to a join ("This
		// application is currently busy. Please try again."); the detail it
		// got is checked in TestDrainWaitsForFrontDoorCalls.
		if m := wait("a call during the drain", late); m["ok"] != false || !strings.Contains(fmt.Sprint(m["error"]), "try again") {
			t.Errorf("a JS call during the drain: %v, want refused (503: try again)", m)
		}
		close(release)
		if m := wait("the running call", res); m["ok"] != true {
			t.Errorf("the JS call running at the drain: %v, want its result", m)
		}
		<-served
	})
	t.Run("drain_timeout", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		url, sim, logs, drain, served := drainGateway(t, fdtest.HoldApp(release), 300*time.Millisecond)
		defer func() {
			if t.Failed() {
				t.Logf("gateway log:\n%s", logs.String())
			}
		}()
		conn, res := jsDrainCall(t, url, "/hold")
		<-conn
		// The client's stream is open (the front door opened the replica's):
		// a stream opened just as the drain starts may meet a kept-alive
		// connection the drain closes (see the README).
		fdtest.WaitFor(t, "the call to run and its stream to open", func() bool {
			return sim.Snapshot().Running == 1 && sim.Requests("queue/data") > 0
		})
		drain()
		if m := wait("the call cut by drain_timeout", res); m["ok"] != false || !strings.Contains(fmt.Sprint(m["error"]), "restarting") {
			t.Errorf("the JS call at drain_timeout: %v, want the restarting error", m)
		}
		<-served
	})
}
