package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/pool"
)

// slowBody sends head (a request without its body end) and then one byte
// every gap until stop is closed, and returns the status line and body of
// the answer. The test's own bound (10 s) only stops a hang.
func slowBody(t *testing.T, addr, head string, gap time.Duration) (status int, body string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tick := time.NewTicker(gap)
		defer tick.Stop()
		for i := 0; i < 1000; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-trickled }()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer while the body trickles: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 512)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// Regression (issue 16, defect 1): an answer written before the body was
// read (401, 404, draining) was never sent while the body trickled, and a
// body that timed out was answered never either.
func TestSlowBodyIsAnswered(t *testing.T) {
	f := newFake()
	g := gateway.New(gateway.Config{Pool: pool.Config{Replicas: []string{"http://r1"}}, Secrets: gateway.Secrets{APIKeys: []string{"k"}}}, f, nil, nil)
	g.SetBodyTimeout(300 * time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	addr := ln.Addr().String()
	head := func(path, auth string) string {
		h := "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
		if auth != "" {
			h += "Authorization: Bearer " + auth + "\r\n"
		}
		return h + "\r\n{"
	}
	for _, tc := range []struct {
		name, path, auth string
		status           int
		code             string
	}{
		{"no key", "/v1/predict/upper", "", 401, "unauthorized"},
		{"unknown route", "/nope", "", 404, "not_found"},
		{"body times out", "/v1/predict/upper", "k", 408, "body_timeout"},
		{"body times out on the REST shape", "/gradio_api/call/upper", "k", 408, "body_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := slowBody(t, addr, head(tc.path, tc.auth), 100*time.Millisecond)
			if status != tc.status || errorCode(t, body) != tc.code {
				t.Fatalf("answer %d %s, want %d %s", status, body, tc.status, tc.code)
			}
		})
	}
}

// TestUnreadBodyKeepsTheConnection: an answer written without reading the
// request's body (401 here) leaves a connection net/http reads the body
// off and keeps; the next request on it must run, not find its context
// already cancelled because the body's phase deadline was moved to now
// after net/http had read the body and begun watching the connection.
func TestUnreadBodyKeepsTheConnection(t *testing.T) {
	f := newFake()
	_, srv, _ := newGateway(t, f, func(c *gateway.Config) { c.Secrets.APIKeys = []string{"k"} })
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	send := func(auth string) (int, string) {
		t.Helper()
		body := `{"data":["abc"]}`
		req := "POST /v1/predict/upper HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
		if auth != "" {
			req += "Authorization: Bearer " + auth + "\r\n"
		}
		if _, err := c.Write([]byte(req + "\r\n" + body)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("answer cut: %v", err)
		}
		return resp.StatusCode, string(b)
	}
	for i := range 3 {
		if status, body := send(""); status != http.StatusUnauthorized {
			t.Fatalf("round %d without a key: %d %s, want 401", i, status, body)
		}
		if status, body := send("k"); status != http.StatusOK || !strings.Contains(body, "ABC") {
			t.Fatalf("round %d with the key, on the same connection: %d %q, want 200 with ABC", i, status, body)
		}
	}
}
