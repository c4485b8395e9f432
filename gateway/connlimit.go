package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// defaultMaxClientConnections bounds the client connections the gateway
// holds open at once (max_client_connections).
const defaultMaxClientConnections = 10000

// defaultMaxClientConnectionsPerAddress bounds the connections one client
// address holds open at once (max_client_connections_per_address). It is a
// tenth of the total, so one address cannot take every place, yet high
// enough for an app server beside the gateway (every call of a Next.js app
// on 127.0.0.1 comes from one address).
const defaultMaxClientConnectionsPerAddress = 1000

// connGuard bounds the client connections: in total (past the limit, new
// connections wait in the kernel's accept queue until a place frees, so
// slowloris or a flood of idle connections cannot take every file
// descriptor while the open connections are still served) and per client
// address (past that, a new connection is answered 429 and closed). At the
// total limit, idle keep-alive connections are closed to make room: a
// client that keeps thousands of idle connections open would otherwise
// hold every place until the idle time-out.
type connGuard struct {
	max, perAddr int // <= 0: no limit

	mu     sync.Mutex // guards the fields below; no I/O under it
	open   int
	byAddr map[string]int
	idle   map[net.Conn]bool
}

// guard wraps ln with the connection limits of the configuration and
// returns the hook the http.Server must call on connection state changes.
func (g *Gateway) guard(ln net.Listener) (net.Listener, func(net.Conn, http.ConnState)) {
	max, perAddr := g.cfg.MaxClientConnections, g.cfg.MaxClientConnectionsPerAddress
	if max == 0 {
		max = defaultMaxClientConnections
	}
	if perAddr == 0 {
		perAddr = defaultMaxClientConnectionsPerAddress
	}
	cg := &connGuard{max: max, perAddr: perAddr, byAddr: map[string]int{}, idle: map[net.Conn]bool{}}
	if max > 0 {
		ln = netutil.LimitListener(ln, max)
	}
	return &guardListener{Listener: ln, g: cg}, cg.connState
}

// atCapLocked reports whether the total limit is reached. WARNING: cg.mu held.
func (cg *connGuard) atCapLocked() bool { return cg.max > 0 && cg.open >= cg.max }

// takeIdleLocked removes and returns every idle connection. WARNING: cg.mu
// held.
func (cg *connGuard) takeIdleLocked() []net.Conn {
	out := make([]net.Conn, 0, len(cg.idle))
	for c := range cg.idle {
		out = append(out, c)
		delete(cg.idle, c)
	}
	return out
}

func (cg *connGuard) connState(c net.Conn, s http.ConnState) {
	cg.mu.Lock()
	var closeNow bool
	switch s {
	case http.StateIdle:
		// At the limit a connection that goes idle is closed rather than
		// kept alive: a waiting client needs its place more.
		closeNow = cg.atCapLocked()
		if !closeNow {
			cg.idle[c] = true
		}
	default:
		delete(cg.idle, c)
	}
	cg.mu.Unlock()
	if closeNow {
		c.Close()
	}
}

type guardListener struct {
	net.Listener
	g *connGuard
}

// tooManyFromAddress is the whole answer to a connection over the
// per-address limit, written before any request was read.
var tooManyFromAddress = func() string {
	body := `{"error":{"code":"too_many_connections","message":"too many connections from this address; retry later"}}`
	return fmt.Sprintf("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}()

func (l *guardListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := remoteHost(c.RemoteAddr().String())
		cg := l.g
		cg.mu.Lock()
		if cg.perAddr > 0 && cg.byAddr[host] >= cg.perAddr {
			cg.mu.Unlock()
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = io.WriteString(c, tooManyFromAddress)
			c.Close()
			continue
		}
		cg.byAddr[host]++
		cg.open++
		var idle []net.Conn
		if cg.atCapLocked() {
			idle = cg.takeIdleLocked()
		}
		cg.mu.Unlock()
		for _, ic := range idle {
			ic.Close()
		}
		return &guardedConn{Conn: c, g: cg, host: host}, nil
	}
}

type guardedConn struct {
	net.Conn
	g    *connGuard
	host string
	once sync.Once
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.mu.Lock()
		c.g.open--
		if c.g.byAddr[c.host]--; c.g.byAddr[c.host] <= 0 {
			delete(c.g.byAddr, c.host)
		}
		delete(c.g.idle, c)
		c.g.mu.Unlock()
	})
	return err
}
