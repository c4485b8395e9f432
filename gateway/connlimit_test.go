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
	start := func(t *testing.T, limit int) string {
		g := gateway.New(gateway.Config{Replicas: []string{"http://r1"}, MaxClientConnections: limit}, newFake(), nil, nil)
		g.SetConnTimeouts(time.Minute, time.Minute) // the limit, not the time-outs, is under test
		addr, stop := serveFake(t, g)
		t.Cleanup(stop)
		return strings.TrimPrefix(addr, "http://")
	}

	t.Run("limit 3", func(t *testing.T) {
		addr := start(t, 3)
		served := dial(t, addr)
		sr := bufio.NewReader(served)
		if resp, err := get(served, sr, 10*time.Second); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("first connection: %v %v", resp, err)
		}
		silent := []net.Conn{dial(t, addr), dial(t, addr)} // idle, never a byte: the limit is reached
		extra := dial(t, addr)                             // connects (the kernel's queue) but is not accepted
		er := bufio.NewReader(extra)
		// A connection of the limit is still served.
		if resp, err := get(served, sr, 10*time.Second); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("an open connection is not served at the limit: %v %v", resp, err)
		}
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

	t.Run("no limit", func(t *testing.T) {
		addr := start(t, -1)
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
	c := gateway.Config{Replicas: []string{"http://r1"}}
	c.Normalize()
	if c.MaxClientConnections != gateway.DefaultMaxClientConnections {
		t.Fatalf("max_client_connections after Normalize: %d, want %d", c.MaxClientConnections, gateway.DefaultMaxClientConnections)
	}
}
