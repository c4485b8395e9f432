package gradio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// nopRWC is a one-way connection: frames to read, writes dropped.
type nopRWC struct{ io.Reader }

func (nopRWC) Write(p []byte) (int, error) { return len(p), nil }
func (nopRWC) Close() error                { return nil }

// pipeRWC is a connection whose frames the test writes as it likes; its
// Close (a budget's cut) ends the read.
type pipeRWC struct{ *io.PipeReader }

func (pipeRWC) Write(p []byte) (int, error) { return len(p), nil }

// header is an unmasked server frame header of op announcing n bytes.
func header(op byte, n int) []byte {
	var b bytes.Buffer
	b.WriteByte(0x80 | op)
	b.WriteByte(127)
	_ = binary.Write(&b, binary.BigEndian, uint64(n))
	return b.Bytes()
}

// frame is an unmasked server frame of op carrying n bytes of payload.
func frame(op byte, n int) []byte {
	return append(header(op, n), bytes.Repeat([]byte("x"), n)...)
}

// TestWSMessageCharged: a Gradio 3 WebSocket message is charged to the
// event budget as it arrives: one that does not fit ends with
// ErrEventTooLarge; one that fits passes its charge to the Hold readText
// returns with it, counted until the Hold's release.
func TestWSMessageCharged(t *testing.T) {
	b := sse.NewBudget(4 << 20)
	in := append(frame(0x1, 1<<20), frame(0x1, 8<<20)...)
	c := newWSConn(nopRWC{bytes.NewReader(in)}, b.Part())
	msg, hold, err := c.readText()
	if err != nil || len(msg) != 1<<20 {
		t.Fatalf("1 MiB message: %d bytes, %v", len(msg), err)
	}
	if hold == nil || b.Held() < 1<<20-sse.DefaultAllowance {
		t.Fatalf("a 1 MiB message was not held: %d bytes counted", b.Held())
	}
	hold.Release()
	if h := b.Held(); h != 0 {
		t.Fatalf("after the message's release %d bytes are still charged", h)
	}
	if _, _, err := c.readText(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("an 8 MiB message over a 4 MiB budget: %v, want ErrEventTooLarge", err)
	}
	c.Close()
	if h := b.Held(); h != 0 {
		t.Fatalf("after Close %d bytes are still charged", h)
	}
}

// TestWSAnnouncedLengthNotTaken: a frame's announced length is neither
// allocated nor charged before its bytes arrive. Before, a replica that
// announced a 60 MiB message and sent nothing took 120 MiB of the budget
// (the payload and its copy) at once.
func TestWSAnnouncedLengthNotTaken(t *testing.T) {
	b := sse.NewBudget(256 << 20)
	b.SetRateFloor(0, 0)
	pr, pw := io.Pipe()
	c := newWSConn(pipeRWC{pr}, b.Part())
	done := make(chan error, 1)
	go func() {
		_, _, err := c.readText()
		done <- err
	}()
	if _, err := pw.Write(append(header(0x1, 60<<20), bytes.Repeat([]byte("x"), 200<<10)...)); err != nil {
		t.Fatal(err)
	}
	if h := b.Held(); h > 512<<10 {
		t.Errorf("%d bytes charged for 200 KiB received of a 60 MiB announcement", h)
	}
	pw.Close()
	if err := <-done; err == nil {
		t.Fatal("a message cut short was read")
	}
	c.Close()
	if h := b.Held(); h != 0 {
		t.Fatalf("after Close %d bytes are still charged", h)
	}
}

// TestWSHostileReplicaLosesItsRoom (issue 33 item 2): a Gradio 3 replica
// that sends most of a large message and stalls is a party of the budget
// like an event stream: another replica's stream that needs room takes it
// back (the WebSocket is cut, ErrBudgetReclaimed, its replica's fault),
// and a trickle is cut by the rate floor (ErrTooSlow). Before, a message
// took twice its announced length from the total, with no account that
// a reclaim or the rate floor could cut: here the 3.5 MiB message was
// refused at once (7 MiB), and the trickle waited at the test's 15 s
// time-out.
func TestWSHostileReplicaLosesItsRoom(t *testing.T) {
	b := sse.NewBudget(4 << 20)
	b.SetRateFloor(0, 0)
	hostile, healthy := b.Part(), b.Part()
	pr, pw := io.Pipe()
	c := newWSConn(pipeRWC{pr}, hostile)
	done := make(chan error, 1)
	go func() {
		_, _, err := c.readText()
		done <- err
	}()
	go func() { // 3 MiB of a 3.5 MiB message, then nothing
		_, _ = pw.Write(append(header(0x1, 7<<19), bytes.Repeat([]byte("x"), 3<<20)...))
	}()
	for i := 0; b.Held() < 3<<20-sse.DefaultAllowance; i++ { // a hang guard, not a measure
		if i > 10000 {
			t.Fatalf("the stalled message holds %d bytes", b.Held())
		}
		time.Sleep(time.Millisecond)
	}
	r := sse.NewReaderBudget(io.NopCloser(strings.NewReader("data: "+strings.Repeat("h", 1<<20)+"\n\n")), 0, healthy)
	defer r.Release()
	if ev, err := r.Next(); err != nil || len(ev.Data) != 1<<20 {
		t.Fatalf("the healthy replica's 1 MiB event beside the stalled message: %d bytes, %v", len(ev.Data), err)
	}
	if err := <-done; !errors.Is(err, sse.ErrBudgetReclaimed) {
		t.Fatalf("the stalled message: %v, want ErrBudgetReclaimed", err)
	}
	pw.Close()
	c.Close()

	slow := sse.NewBudget(4 << 20)
	slow.SetRateFloor(32<<10, 100*time.Millisecond)
	pr, pw = io.Pipe()
	defer pw.Close()
	c = newWSConn(pipeRWC{pr}, slow.Part())
	defer c.Close()
	go func() {
		_, _ = pw.Write(append(header(0x1, 1<<20), bytes.Repeat([]byte("x"), 200<<10)...))
	}()
	if _, _, err := c.readText(); !errors.Is(err, sse.ErrTooSlow) {
		t.Fatalf("a message that stopped coming: %v, want ErrTooSlow", err)
	}
}
