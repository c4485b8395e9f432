package gradio_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestKeepAliveRace runs calls spaced just over the server's keep-alive
// time-out, the moment uvicorn closes the idle connection the client would
// reuse. The client's own keep-alive (below the server's) closes it first,
// so no call fails. Scaled down: 40 ms against 50 ms (4 s against 5 s by
// default).
func TestKeepAliveRace(t *testing.T) {
	const serverIdle = 50 * time.Millisecond
	s := startSim(t, gradiotest.Gradio5, nil, func(s *gradiotest.Server) { s.KeepAliveTimeout = serverIdle })
	c := connect(t, s.URL, gradio.WithKeepAlive(serverIdle*4/5))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const calls = 200
	failed := 0
	for i := range calls {
		sess := c.NewSession()
		if _, err := sess.Predict(ctx, "upper", "x"); err != nil {
			failed++
			t.Logf("call %d: %v", i, err)
		}
		sess.Close()
		time.Sleep(serverIdle + 3*time.Millisecond) // just over the server's idle time
	}
	if failed != 0 {
		t.Fatalf("%d of %d calls failed", failed, calls)
	}
	if got := s.Executions("upper"); got != calls {
		t.Fatalf("the app ran %d calls, want %d", got, calls)
	}
}

// staleConnTransport fails the first POST to a path ending in route
// (queue/join when empty) as a connection the server closed while it was
// picked: reused, and the request not written in full. written makes it
// report the request as written in full instead, and closedIdle fails it,
// written, with the error net/http gives when the server had closed the
// idle connection before the request was put on it.
type staleConnTransport struct {
	base       http.RoundTripper
	route      string
	written    bool
	closedIdle bool
	failed     atomic.Int32
}

func (tr *staleConnTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	route := cmp.Or(tr.route, "/queue/join")
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, route) && tr.failed.Add(1) == 1 {
		if tr.body(req) != nil {
			return nil, errors.New("read body")
		}
		if trace := httptrace.ContextClientTrace(req.Context()); trace != nil {
			if trace.GotConn != nil {
				trace.GotConn(httptrace.GotConnInfo{Reused: true, WasIdle: true})
			}
			if (tr.written || tr.closedIdle) && trace.WroteRequest != nil {
				trace.WroteRequest(httptrace.WroteRequestInfo{})
			}
		}
		if tr.closedIdle {
			return nil, errors.New("http: server closed idle connection")
		}
		return nil, errors.New("write tcp: connection reset by peer")
	}
	return tr.base.RoundTrip(req)
}

func (tr *staleConnTransport) body(req *http.Request) error {
	if req.Body == nil {
		return nil
	}
	return req.Body.Close()
}

// TestJoinRetriedOnStaleConnection: a join that failed on a reused
// connection before it was written in full is sent again on a new one and
// runs once; one written in full is never sent again (it may have run).
func TestJoinRetriedOnStaleConnection(t *testing.T) {
	s := startSim(t, gradiotest.Gradio5, nil, nil)
	tr := &staleConnTransport{base: proxyTransport(t)}
	c := connect(t, s.URL, gradio.WithHTTPClient(&http.Client{Transport: tr}))
	ctx := testCtx(t)
	out, err := c.Predict(ctx, "upper", "once")
	if err != nil {
		t.Fatalf("Predict after a stale connection: %v", err)
	}
	if len(out) == 0 || string(out[0]) != `"ONCE"` {
		t.Fatalf("out = %v", out)
	}
	if n := tr.failed.Load(); n != 2 {
		t.Fatalf("joins sent = %d, want 2 (the failed one and its retry)", n)
	}
	if got := s.Executions("upper"); got != 1 {
		t.Fatalf("the app ran the call %d times, want 1", got)
	}

	tr2 := &staleConnTransport{base: proxyTransport(t), written: true}
	c2 := connect(t, s.URL, gradio.WithHTTPClient(&http.Client{Transport: tr2}))
	_, err = c2.Predict(ctx, "upper", "maybe")
	var lost *gradio.ConnectionLostError
	if !errors.As(err, &lost) || !lost.MaybeAccepted {
		t.Fatalf("err = %v, want a ConnectionLostError with MaybeAccepted", err)
	}
	if n := tr2.failed.Load(); n != 1 {
		t.Fatalf("joins sent = %d, want 1: a join written in full is never sent again", n)
	}
}

// TestPostsRetriedOnStaleConnection: the other POSTs that start or feed a
// call (Gradio 4.0-4.19's queue/data with the call's data, and /call) get
// the same single retry when a stale kept-alive connection failed them
// before they were written, and every POST when net/http says the server had
// closed the connection as idle (the request was written into a socket the
// server no longer read): the call then runs once instead of failing.
func TestPostsRetriedOnStaleConnection(t *testing.T) {
	for _, tc := range []struct {
		mode       gradiotest.Mode
		route      string
		call       bool
		closedIdle bool
	}{
		{gradiotest.Gradio4SSE, "/queue/data", false, false},
		{gradiotest.Gradio4SSE, "/queue/data", false, true},
		{gradiotest.Gradio5, "/call/upper", true, false},
		{gradiotest.Gradio5, "/queue/join", false, true},
	} {
		t.Run(fmt.Sprintf("%s%s/closedIdle=%v", tc.mode, tc.route, tc.closedIdle), func(t *testing.T) {
			s := startSim(t, tc.mode, nil, nil)
			tr := &staleConnTransport{base: proxyTransport(t), route: tc.route, closedIdle: tc.closedIdle}
			url := s.URL
			if tc.call {
				url, _ = queueBlocker(t, s.URL) // a proxy forwarding only /call
			}
			c := connect(t, url, gradio.WithHTTPClient(&http.Client{Transport: tr}))
			out, err := c.Predict(testCtx(t), "upper", "once")
			if err != nil {
				t.Fatalf("Predict after a stale connection: %v", err)
			}
			if len(out) == 0 || string(out[0]) != `"ONCE"` {
				t.Fatalf("out = %v", out)
			}
			if n := tr.failed.Load(); n != 2 {
				t.Fatalf("POSTs to %s = %d, want 2 (the failed one and its retry)", tc.route, n)
			}
			if got := s.Executions("upper"); got != 1 {
				t.Fatalf("the app ran the call %d times, want 1", got)
			}
		})
	}
}
