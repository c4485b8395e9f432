package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
)

// serveFake runs g on a loopback listener; stop starts the drain and
// waits for Serve to return.
func serveFake(t *testing.T, g *gateway.Gateway) (url string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	var once bool
	stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	return "http://" + ln.Addr().String(), stop
}

// Regression (issue 16, defect 2): a call cut by the drain time-out was
// answered an empty 200 (the cancel mapped to 499, never written).
func TestDrainTimeoutAnswersDraining(t *testing.T) {
	f := newFake()
	g := gateway.New(gateway.Config{DrainTimeout: 100 * time.Millisecond}, f, nil, nil)
	url, stop := serveFake(t, g)

	type got struct {
		status int
		ctype  string
		body   string
		err    error
	}
	post := func(path string) <-chan got {
		ch := make(chan got, 1)
		go func() {
			resp, err := http.Post(url+path, "application/json", strings.NewReader(`{"data":[]}`))
			if err != nil {
				ch <- got{err: err}
				return
			}
			defer resp.Body.Close()
			var b strings.Builder
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				b.WriteString(sc.Text() + "\n")
			}
			ch <- got{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: b.String()}
		}()
		return ch
	}
	predict := post("/v1/predict/slow")
	submit := post("/v1/submit/slow")
	<-f.started
	<-f.started
	stop()

	p := <-predict
	if p.err != nil {
		t.Fatal(p.err)
	}
	if p.status != http.StatusServiceUnavailable || errorCode(t, p.body) != "draining" {
		t.Errorf("predict cut by the drain: %d %q, want 503 draining", p.status, p.body)
	}
	s := <-submit
	if s.err != nil {
		t.Fatal(s.err)
	}
	if !strings.Contains(s.body, "event: error") || !strings.Contains(s.body, `"code":"draining"`) {
		t.Errorf("submit cut by the drain: %q, want an error event with code draining", s.body)
	}
}

// A cancel that did not come from the caller (the app cancelled the job)
// is answered: the caller still listens, so no empty 200.
func TestAppCancelIsAnswered(t *testing.T) {
	_, srv, _ := newGateway(t, newFake(), nil)
	a := do(t, "POST", srv.URL+"/v1/predict/appcancel", `{"data":[]}`)
	if a.status != http.StatusBadGateway || errorCode(t, a.body) != "canceled" {
		t.Fatalf("%d %q, want 502 canceled", a.status, a.body)
	}
}

// Regression (issue 16, defect 6): /readyz never said 503 during a drain
// (the listener closed at once). While calls are in flight it answers,
// and so do new calls, with 503 draining.
func TestDrainKeepsAnsweringProbes(t *testing.T) {
	f := newFake()
	g := gateway.New(gateway.Config{DrainTimeout: 10 * time.Second}, f, nil, nil)
	url, stop := serveFake(t, g)
	got := make(chan answer, 1)
	go func() { got <- do(t, "POST", url+"/v1/predict/slow", `{"data":[]}`) }()
	<-f.started
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	// The drain has begun once readyz says so; bounded by the test's ctx.
	var a answer
	for range 500 {
		a = do(t, "GET", url+"/readyz", "")
		if a.status == http.StatusServiceUnavailable {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "draining") {
		t.Fatalf("readyz while draining: %d %s", a.status, a.body)
	}
	if a := do(t, "POST", url+"/v1/predict/upper", `{"data":["x"]}`); a.status != 503 || errorCode(t, a.body) != "draining" {
		t.Errorf("a new call while draining: %d %s", a.status, a.body)
	}
	close(f.release)
	if a := <-got; a.status != 200 {
		t.Errorf("the call in flight: %d %s", a.status, a.body)
	}
	<-stopped
}

// A /gradio_api/call stream cut by the drain time-out ends with an error
// event naming the drain, not a bare end of stream (issue 36: 2 of 2 such
// streams ended with no error event).
func TestDrainTimeoutEndsRESTCallStream(t *testing.T) {
	f := newFake()
	g := gateway.New(gateway.Config{DrainTimeout: 100 * time.Millisecond}, f, nil, nil)
	url, stop := serveFake(t, g)
	a := do(t, "POST", url+"/gradio_api/call/slow", `{"data":[]}`)
	if a.status != http.StatusOK {
		t.Fatalf("POST: %d %s", a.status, a.body)
	}
	id := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(a.body), `{"event_id":"`), `"}`)
	<-f.started
	resp, err := http.Get(url + "/gradio_api/call/slow/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The GET's stream is open (its headers came): drain now.
	go stop()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	got := b.String()
	if !strings.Contains(got, "event: error") || !strings.Contains(got, `"code":"draining"`) {
		t.Fatalf("the stream cut by the drain: %q, want an error event with code draining", got)
	}
}

// A request sent, during a drain, on a kept-alive connection that was idle
// when the drain began gets an answer (503 draining, and the connection
// closed with it), not a reset or an EOF: the drain no longer closes idle
// connections under a caller that may be sending on them (issue 36: 4
// callers got a reset or an EOF during one SIGTERM drain).
func TestDrainAnswersOnIdleKeepAlive(t *testing.T) {
	f := newFake()
	g := gateway.New(gateway.Config{DrainTimeout: 10 * time.Second}, f, nil, nil)
	url, stop := serveFake(t, g)
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	send := func() (*http.Response, error) {
		req, _ := http.NewRequest("POST", url+"/v1/predict/upper", strings.NewReader(`{"data":["x"]}`))
		req.Header.Set("Content-Type", "application/json")
		if err := req.Write(conn); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(br, req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	if resp, err := send(); err != nil || resp.StatusCode != 200 || resp.Close {
		t.Fatalf("before the drain: %v %v", resp, err)
	}
	// The connection is idle and kept alive. A call in flight holds the
	// drain open.
	got := make(chan answer, 1)
	go func() { got <- do(t, "POST", url+"/v1/predict/slow", `{"data":[]}`) }()
	<-f.started
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	for range 500 {
		if do(t, "GET", url+"/readyz", "").status == http.StatusServiceUnavailable {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := send()
	if err != nil {
		t.Fatalf("a request on the idle kept-alive connection during the drain: %v, want an answer", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Errorf("during the drain: %d, close %v; want 503 with the connection closed", resp.StatusCode, resp.Close)
	}
	close(f.release)
	<-got
	<-stopped
}
