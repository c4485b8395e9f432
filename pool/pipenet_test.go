package pool_test

import (
	"context"

	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// pipeNet is an in-memory network of net.Pipe connections. Goroutines that
// wait on it are durably blocked in the sense of testing/synctest, so tests
// with simulated replicas can run inside a synctest bubble with fake time
// (a real socket read is not durably blocking and would freeze the clock).
type pipeNet struct {
	mu   sync.Mutex // guards ls and next
	ls   map[string]*pipeListener
	next int
}

func newPipeNet() *pipeNet { return &pipeNet{ls: map[string]*pipeListener{}} }

// listen returns a listener at a fresh fake 127.0.0.1 address.
func (n *pipeNet) listen() *pipeListener {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	l := &pipeListener{
		n:    n,
		addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 20000 + n.next},
		ch:   make(chan net.Conn),
		done: make(chan struct{}),
	}
	n.ls[l.addr.String()] = l
	return l
}

func (n *pipeNet) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.ls[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	c1, c2 := net.Pipe()
	select {
	case l.ch <- c2:
		return c1, nil
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// httpClient returns a client whose transport dials through the pipe net.
func (n *pipeNet) httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         n.dial,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}}
}

type pipeListener struct {
	n    *pipeNet
	addr *net.TCPAddr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		delete(l.n.ls, l.addr.String())
		l.n.mu.Unlock()
	})
	return nil
}

func (l *pipeListener) Addr() net.Addr { return l.addr }

func (l *pipeListener) url() string { return fmt.Sprintf("http://%s", l.addr) }
