package frontdoor_test

import (
	"bufio"
	"bytes"
	"encoding/json"
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

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// pauseCloseBody passes a queue/data stream through, calling pause right
// before it delivers the stream's close_stream record.
type pauseCloseBody struct {
	rc    io.ReadCloser
	pause func()
	buf   []byte
	done  bool // the close_stream record was reached
}

func (b *pauseCloseBody) Read(p []byte) (int, error) {
	for {
		if len(b.buf) > 0 {
			if i := bytes.Index(b.buf, []byte(`close_stream`)); i >= 0 && !b.done {
				start := bytes.LastIndex(b.buf[:i], []byte("data: "))
				if start > 0 {
					n := copy(p, b.buf[:start])
					b.buf = b.buf[n:]
					return n, nil
				}
				b.pause()
				b.done = true
			}
			n := copy(p, b.buf)
			b.buf = b.buf[n:]
			return n, nil
		}
		tmp := make([]byte, 4096)
		n, err := b.rc.Read(tmp)
		b.buf = append(b.buf, tmp[:n]...)
		if n == 0 && err != nil {
			return 0, err
		}
	}
}

func (b *pauseCloseBody) Close() error { return b.rc.Close() }

// TestFrontDoorCloseRaceKeepsCallerStream reproduces Gradio's close race
// (a replica decides to close an idle session's stream just as a new join
// arrives) at the replica: its close_stream reaches the gateway only
// after the caller's next join was accepted. The gateway holds the
// session's last completion until the replica's close_stream, to write
// both at once (see TestFrontDoorLastCompletionWithCloseStream); finding
// the new call in flight then, it writes the completion alone, does not
// pass that close_stream on (@gradio/client would wait for ever for the
// new call), reopens the backend stream and delivers the new call's
// messages on the caller's same stream.
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
				// The first stream stops before its close_stream until
				// release is closed.
				resp.Body = &pauseCloseBody{rc: resp.Body, pause: func() {
					once.Do(func() { close(held) })
					select {
					case <-release:
					case <-time.After(20 * time.Second): // hang guard
					}
				}}
			})
		}
		return nil
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)

	srv, fd, _ := newDoorOver(t, []string{front.URL}, func(c *config) { c.Pool.MaxConnections = 4 })
	fn := fdtest.FnIndex(t, srv.URL, "upper")

	e1, err := fdtest.Join(srv.URL, "race", fn, "one")
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
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the replica's close_stream never came")
	}
	// The replica has closed its stream after e1's completion; the
	// caller joins again before that close_stream has reached the
	// gateway.
	e2, err := fdtest.Join(srv.URL, "race", fn, "two")
	if err != nil {
		t.Fatal(err)
	}
	releaseOnce.Do(func() { close(release) })
	var got []string
	for {
		m := next()
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
	if want := []string{"completed " + e1, "completed " + e2, "close_stream"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("after the race the caller's stream carried %v, want %v", got, want)
	}
	if st := fd.Stats(); st.InFlight != 0 || st.Lost != 0 {
		t.Errorf("stats %+v: want no call in flight or lost", st)
	}
}

// TestFrontDoorLastCompletionWithCloseStream: the session's last
// completion reaches the caller together with close_stream (the official
// JS client then opens a new stream for its next call), and the gateway
// reads the replica's stream to its own close_stream before it lets go of
// it: Gradio drops a session's queued messages when the reader of its
// stream goes away, and a next join of the session may be there already.
func TestFrontDoorLastCompletionWithCloseStream(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	target, _ := url.Parse(sim.URL)
	var early, seen atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	proxy.ModifyResponse = func(resp *http.Response) error {
		if strings.HasSuffix(resp.Request.URL.Path, "/queue/data") {
			// Each replica stream's close_stream comes a little later;
			// early counts those whose reader (the gateway) went away
			// before it came.
			ctx := resp.Request.Context()
			resp.Body = &pauseCloseBody{rc: resp.Body, pause: func() {
				time.Sleep(50 * time.Millisecond)
				if ctx.Err() != nil {
					early.Add(1)
				}
				seen.Add(1)
			}}
		}
		return nil
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	srv, fd, _ := newDoorOver(t, []string{front.URL}, func(c *config) { c.Pool.MaxConnections = 4 })
	fn := fdtest.FnIndex(t, srv.URL, "upper")
	for i := range 3 {
		id, err := fdtest.Join(srv.URL, "lastone", fn, "x")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(srv.URL + "/gradio_api/queue/data?session_hash=lastone")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last := bytes.LastIndex(b, []byte(`data: {"msg":"process_completed"`))
		if last < 0 || !bytes.Contains(b[last:], []byte(id)) ||
			!bytes.HasSuffix(bytes.TrimSpace(b), []byte(`data: {"msg":"close_stream","event_id":null}`)) {
			t.Fatalf("call %d: the caller's stream:\n%s", i, b)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); seen.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := early.Load(); n != 0 {
		t.Errorf("the gateway let go of %d replica streams before their close_stream", n)
	}
	if st := fd.Stats(); st.InFlight != 0 || st.Lost != 0 {
		t.Errorf("stats %+v: want no call in flight or lost", st)
	}
}
