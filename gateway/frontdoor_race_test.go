package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// holdCloseBody passes a queue/data stream through but stops right before
// its first close_stream record until release is closed.
type holdCloseBody struct {
	rc      io.ReadCloser
	release <-chan struct{}
	held    chan<- struct{} // closed when the hold starts
	once    *sync.Once
	buf     []byte
	done    bool // the hold is over
}

func (h *holdCloseBody) Read(p []byte) (int, error) {
	for {
		if len(h.buf) > 0 {
			if !h.done {
				if i := bytes.Index(h.buf, []byte(`close_stream`)); i >= 0 {
					start := bytes.LastIndex(h.buf[:i], []byte("data: "))
					if start > 0 {
						n := copy(p, h.buf[:start])
						h.buf = h.buf[n:]
						return n, nil
					}
					h.once.Do(func() { close(h.held) })
					select {
					case <-h.release:
					case <-time.After(20 * time.Second): // hang guard
					}
					h.done = true
				}
			}
			n := copy(p, h.buf)
			h.buf = h.buf[n:]
			return n, nil
		}
		tmp := make([]byte, 4096)
		n, err := h.rc.Read(tmp)
		h.buf = append(h.buf, tmp[:n]...)
		if n == 0 && err != nil {
			return 0, err
		}
	}
}

func (h *holdCloseBody) Close() error { return h.rc.Close() }

// TestFrontDoorCloseRaceKeepsCallerStream reproduces Gradio's close race
// (a replica decides to close an idle session's stream just as a new join
// arrives) at the replica: its close_stream reaches the gateway
// only after the caller's next join was accepted. The gateway ends the
// caller's stream itself, in the same write as the session's last
// completion (so that @gradio/client opens a new stream for its next
// call instead of taking the next join's answer on a stream about to
// close), and the replica's late close_stream must not reach the
// caller's next stream: the new call's messages are delivered there.
func TestFrontDoorCloseRaceKeepsCallerStream(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	target, _ := url.Parse(sim.URL)
	release, held := make(chan struct{}), make(chan struct{})
	var once, armed sync.Once
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	proxy.ModifyResponse = func(resp *http.Response) error {
		if strings.HasSuffix(resp.Request.URL.Path, "/queue/data") {
			armed.Do(func() {
				resp.Body = &holdCloseBody{rc: resp.Body, release: release, held: held, once: &once}
			})
		}
		return nil
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)

	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{front.URL}, MinConnections: 1, MaxConnections: 4}}
	p, err := pool.New(cfg.PoolConfig(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(cfg, gateway.PoolBackend(p, cfg.Pool.MaxConnections), nil, nil)
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = g.Close(context.Background())
		_ = p.Close(context.Background())
	})
	fn := fnIndexOf(t, srv.URL, "upper")

	e1, err := fdJoin(srv.URL, "race", fn, "one")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(srv.URL + "/gradio_api/queue/data?session_hash=race")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msgs := make(chan map[string]any, 32)
	go func() {
		defer close(msgs)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				if json.Unmarshal([]byte(d), &m) == nil && m["msg"] != "heartbeat" {
					msgs <- m
				}
			}
		}
	}()
	next := func() map[string]any {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatal("the caller's stream ended")
			}
			return m
		case <-time.After(20 * time.Second): // hang guard
			t.Fatal("no message on the caller's stream")
		}
		return nil
	}
	for m := next(); m["msg"] != "process_completed"; m = next() {
	}
	// The gateway ends the caller's stream with the session's last
	// completion, as Gradio does: its own close_stream, since the
	// replica's is held.
	if m := next(); m["msg"] != "close_stream" {
		t.Fatalf("after the last completion the caller's stream carried %v, want close_stream", m)
	}
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the replica's close_stream never came")
	}
	// The replica has closed its stream; the caller joins again before
	// that close_stream has reached the gateway, and opens its next
	// stream (the official client opens one per join after a close).
	e2, err := fdJoin(srv.URL, "race", fn, "two")
	if err != nil {
		t.Fatal(err)
	}
	resp2, err := http.Get(srv.URL + "/gradio_api/queue/data?session_hash=race")
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	releaseOnce.Do(func() { close(release) })
	var got []string
	sc := bufio.NewScanner(resp2.Body)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(d), &m) != nil {
			continue
		}
		id, _ := m["event_id"].(string)
		if m["msg"] == "close_stream" {
			got = append(got, "close_stream")
			break
		}
		if m["msg"] == "process_completed" {
			if m["success"] != true {
				t.Errorf("call %s: %v", id, m)
			}
			got = append(got, "completed "+id)
		}
	}
	if want := []string{"completed " + e2, "close_stream"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("after the race the caller's next stream carried %v, want %v (e1 was %s)", got, want, e1)
	}
	if st := g.FrontDoor().Stats(); st.InFlight != 0 || st.Lost != 0 {
		t.Errorf("stats %+v: want no call in flight or lost", st)
	}
}
