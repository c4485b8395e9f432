package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
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
	max, perAddr int           // <= 0: no limit
	stall        time.Duration // a write that moves no byte for this long fails (<= 0: none)

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
	cg := &connGuard{max: max, perAddr: perAddr, stall: g.writeStall, byAddr: map[string]int{}, idle: map[net.Conn]bool{}}
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
	// deadline is the write deadline Write set last, in Unix ns (atomic:
	// a 100-continue may be written beside the answer).
	deadline atomic.Int64
}

// stallChunk is the most one write stall deadline covers: a large write
// (an 8 MiB output goes to the connection in one Write) must make
// progress, not finish, within the bound.
const stallChunk = 64 << 10

// Write writes b in pieces of at most stallChunk bytes, each of which must
// leave within connGuard.stall: a caller that takes no byte of its answer
// for that long (stuck, or holding the connection open on purpose: TCP
// keeps it for as long as the peer answers its probes) fails the write,
// which ends the handler writing to it and closes the connection. A front
// door stream's relay would otherwise wait on that write for ever, its
// replica's stream unread and its call's slot held after the call ended.
//
// The deadline is moved at most once per 1/60 of the bound (a second at
// the default), not per write: setting it costs more than a small write
// on loopback. So a piece fails after 59/60 to the whole of the bound
// without progress. It is never cleared: each write moves it first, and
// the http.Server sets none of its own (no WriteTimeout).
func (c *guardedConn) Write(b []byte) (int, error) {
	stall := c.g.stall
	if stall <= 0 {
		return c.Conn.Write(b)
	}
	n := 0
	for len(b) > 0 {
		if now := time.Now(); now.Add(stall-stall/60).UnixNano() > c.deadline.Load() {
			d := now.Add(stall)
			c.deadline.Store(d.UnixNano())
			_ = c.Conn.SetWriteDeadline(d)
		}
		m, err := c.Conn.Write(b[:min(len(b), stallChunk)])
		n += m
		if err != nil {
			return n, err
		}
		b = b[m:]
	}
	return n, nil
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
