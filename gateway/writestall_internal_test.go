package gateway

import (
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkGuardedConnWrite: what the write stall deadline costs a write
// of an event (1 KiB) to a caller on loopback, beside the same write
// without it.
func BenchmarkGuardedConnWrite(b *testing.B) {
	for _, bc := range []struct {
		name  string
		stall time.Duration
	}{{"no stall", 0}, {"stall", defaultWriteStall}} {
		b.Run(bc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err == nil {
					_, _ = io.Copy(io.Discard, c)
					c.Close()
				}
			}()
			raw, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			c := &guardedConn{Conn: raw, g: &connGuard{stall: bc.stall, byAddr: map[string]int{}, idle: map[net.Conn]bool{}}}
			defer c.Close()
			buf := make([]byte, 1<<10)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
