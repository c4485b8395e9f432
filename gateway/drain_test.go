package gateway_test

import (
	"bufio"
	"context"
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
