package gradio

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// nopRWC is a one-way connection: frames to read, writes dropped.
type nopRWC struct{ io.Reader }

func (nopRWC) Write(p []byte) (int, error) { return len(p), nil }
func (nopRWC) Close() error                { return nil }

// frame is an unmasked server frame of op carrying n bytes of payload.
func frame(op byte, n int) []byte {
	var b bytes.Buffer
	b.WriteByte(0x80 | op)
	b.WriteByte(127)
	_ = binary.Write(&b, binary.BigEndian, uint64(n))
	b.Write(bytes.Repeat([]byte("x"), n))
	return b.Bytes()
}

// TestWSMessageCharged: a Gradio 3 WebSocket message is charged to the
// EventBudget before its payload is allocated: one that does not fit ends
// with ErrEventTooLarge; one that fits is charged until the next read or
// Close, which give it back.
func TestWSMessageCharged(t *testing.T) {
	b := sse.NewBudget(4 << 20)
	in := append(frame(0x1, 1<<20), frame(0x1, 8<<20)...)
	c := &wsConn{rwc: nopRWC{bytes.NewReader(in)}, budget: b}
	c.br = bufio.NewReader(c.rwc)
	msg, err := c.readText()
	if err != nil || len(msg) != 1<<20 {
		t.Fatalf("1 MiB message: %d bytes, %v", len(msg), err)
	}
	if b.Held() == 0 {
		t.Fatal("a 1 MiB message was not charged")
	}
	if _, err := c.readText(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("an 8 MiB message over a 4 MiB budget: %v, want ErrEventTooLarge", err)
	}
	if h := b.Held(); h != 0 {
		t.Fatalf("the refused message left %d bytes charged", h)
	}
	c2 := &wsConn{rwc: nopRWC{bytes.NewReader(frame(0x1, 2<<20))}, budget: b}
	c2.br = bufio.NewReader(c2.rwc)
	if _, err := c2.readText(); err != nil {
		t.Fatal(err)
	}
	c2.Close()
	if h := b.Held(); h != 0 {
		t.Fatalf("after Close %d bytes are still charged", h)
	}
}
