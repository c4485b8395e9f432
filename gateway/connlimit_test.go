package gateway_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/pool"
)

// Security (issue 16): past max_client_connections, a new connection waits
// to be accepted (it gets no answer) while the connections already open
// are still served; it is served once one of them closes. Negative: no
// limit.
func TestClientConnectionLimit(t *testing.T) {
	dial := func(t *testing.T, addr string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// get sends GET /healthz on c and reads the answer within wait.
	get := func(c net.Conn, r *bufio.Reader, wait time.Duration) (*http.Response, error) {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return nil, err
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(r, nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	start := func(t *testing.T, limit, perAddress int) string {
		g := gateway.New(gateway.Config{Pool: pool.Config{Replicas: []string{"http://r1"}}, MaxClientConnections: limit, MaxClientConnectionsPerAddress: perAddress}, newFake(), nil, nil)
		g.SetConnTimeouts(time.Minute, time.Minute) // the limit, not the time-outs, is under test
		addr, stop := serveFake(t, g)
		t.Cleanup(stop)
		return strings.TrimPrefix(addr, "http://")
	}

	t.Run("limit 3", func(t *testing.T) {
		addr := start(t, 3, 0)
		// Three connections that never send a byte hold every place.
		silent := []net.Conn{dial(t, addr), dial(t, addr), dial(t, addr)}
		extra := dial(t, addr) // connects (the kernel's queue) but is not accepted
		er := bufio.NewReader(extra)
		if resp, err := get(extra, er, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connection past the limit was served: %v %v", resp, err)
		}
		// One of the open connections closes: the waiting one is accepted
		// and its request (already sent) answered.
		silent[0].Close()
		_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(er, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the waiting connection was not served once a place was free: %v %v", resp, err)
		}
		resp.Body.Close()
	})

	t.Run("idle keep-alive connections make room at the limit", func(t *testing.T) {
		addr := start(t, 3, 0)
		// A client keeps a served connection idle (keep-alive) ...
		idle := dial(t, addr)
		ir := bufio.NewReader(idle)
		if resp, err := get(idle, ir, 10*time.Second); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("first connection: %v %v", resp, err)
		}
		// ... and the limit is reached: the idle one is closed, so a
		// waiting client is served instead of waiting for the idle time-out.
		dial(t, addr)
		dial(t, addr)
		waiting := dial(t, addr)
		if resp, err := get(waiting, bufio.NewReader(waiting), 10*time.Second); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("a waiting client was not served while an idle connection held a place: %v %v", resp, err)
		}
		_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := ir.ReadByte(); err == nil {
			t.Error("the idle keep-alive connection was not closed at the limit")
		}
	})

	t.Run("per address", func(t *testing.T) {
		addr := start(t, 100, 2)
		dial(t, addr)
		dial(t, addr)
		over := dial(t, addr)
		_ = over.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(over), nil)
		if err != nil {
			t.Fatalf("the connection over the per-address limit got no answer: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"code":"too_many_connections"`) {
			t.Fatalf("over the per-address limit: %d %v %s", resp.StatusCode, resp.Header, body)
		}
	})

	t.Run("no limit", func(t *testing.T) {
		addr := start(t, -1, -1)
		for range 5 {
			dial(t, addr)
		}
		c := dial(t, addr)
		if resp, err := get(c, bufio.NewReader(c), 10*time.Second); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("with no limit: %v %v", resp, err)
		}
	})
}

func TestMaxClientConnectionsDefault(t *testing.T) {
	c := gateway.Config{Pool: pool.Config{Replicas: []string{"http://r1"}}}
	c.Normalize()
	if c.MaxClientConnections != gateway.DefaultMaxClientConnections {
		t.Fatalf("max_client_connections after Normalize: %d, want %d", c.MaxClientConnections, gateway.DefaultMaxClientConnections)
	}
}
