package bench

import (
	"io"
	"net"
	"sync"
	"time"
)

// delayProxy is a loopback TCP proxy that delays every byte by half of
// rtt in each direction, in order: a Redis rtt away, for the cluster
// section. Close stops it and its connections.
type delayProxy struct {
	ln    net.Listener
	half  time.Duration
	mu    sync.Mutex // guards conns
	conns []net.Conn
	wg    sync.WaitGroup
}

func startDelayProxy(upstream string, rtt time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, half: rtt / 2}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(u, c) })
			p.wg.Go(func() { p.pipe(c, u) })
		}
	})
	return p, nil
}

func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk sent half an rtt after it was read.
func (p *delayProxy) pipe(dst io.WriteCloser, src io.Reader) {
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.half)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
	dst.Close()
}

func (p *delayProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
