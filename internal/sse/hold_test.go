package sse_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// holdOne reads the one event of a stream of size bytes of data on part
// b, holds it (as a consumer decoding it would: Hold), and ends the
// stream: the Reader is released, the Hold is not.
func holdOne(t *testing.T, b *sse.Budget, size int) *sse.Hold {
	t.Helper()
	r := sse.NewReaderBudget(io.NopCloser(strings.NewReader("data: "+strings.Repeat("o", size)+"\n\n")), 0, b)
	defer r.Release()
	ev, err := r.Next()
	if err != nil || len(ev.Data) != size {
		t.Fatalf("Next: %d bytes, %v", len(ev.Data), err)
	}
	h, err := r.Hold(len(ev.Data))
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next after the event: %v", err)
	}
	return h
}

// TestHoldCountsUntilRelease (issue 33 item 2): an event's bytes stay
// charged, to the same party, once its Reader handed it over and was
// released, until the consumer releases its Hold; and a Hold of a party
// over its share is taken back for another party's room, which Hold.Err
// reports (the consumer then drops its output and fails its call).
func TestHoldCountsUntilRelease(t *testing.T) {
	const size = 1 << 20
	root := sse.NewBudget(4 << 20)
	root.SetRateFloor(0, 0)
	part := root.Part()
	h := holdOne(t, part.Party("greedy"), size)
	if got := root.Held(); got < size-sse.DefaultAllowance || got > size {
		t.Fatalf("held after the stream ended: %d bytes, want about %d (the event's)", got, size)
	}
	h.Release()
	h.Release() // twice: nothing more
	if got := root.Held(); got != 0 {
		t.Fatalf("held after Release: %d", got)
	}

	// A greedy party holds three outputs (3 MiB of 4): another party
	// reading 0.75 MiB (about 1.5 MiB while it reads, in its 2 MiB share),
	// takes room back from them.
	var hs []*sse.Hold
	for range 3 {
		hs = append(hs, holdOne(t, part.Party("greedy"), size))
	}
	r := sse.NewReaderBudget(io.NopCloser(strings.NewReader("data: "+strings.Repeat("b", 3*size/4)+"\n\n")), 0, part.Party("bystander"))
	defer r.Release()
	if ev, err := r.Next(); err != nil || len(ev.Data) != 3*size/4 {
		t.Fatalf("bystander beside the held outputs: %d bytes, %v", len(ev.Data), err)
	}
	cut := 0
	for _, h := range hs {
		if err := h.Err(); err != nil {
			if !errors.Is(err, sse.ErrPartyOverShare) {
				t.Errorf("a held output taken back with %v, want ErrPartyOverShare", err)
			}
			cut++
		}
		h.Release()
	}
	if cut == 0 {
		t.Fatal("no held output was taken back for the bystander's room")
	}
	r.Release()
	if got := root.Held(); got != 0 {
		t.Fatalf("held after every Release: %d", got)
	}
}

// TestChargeCountsUntilRelease: Charge holds bytes no event brought in (a
// consumer's backlog of outputs) against the Reader's party until the
// Hold's Release, from any goroutine, refuses them past the budget as a
// growing event is refused, and holds nothing once the stream is over.
func TestChargeCountsUntilRelease(t *testing.T) {
	const size = 1 << 20
	root := sse.NewBudget(4 << 20)
	root.SetRateFloor(0, 0)
	r := sse.NewReaderBudget(io.NopCloser(strings.NewReader("")), 0, root.Part().Party("reader"))
	var hs []*sse.Hold
	for range 4 {
		done := make(chan struct{})
		go func() { // another goroutine than the Reader's
			defer close(done)
			h, err := r.Charge(size)
			if err != nil {
				t.Errorf("Charge within the budget: %v", err)
			}
			hs = append(hs, h)
		}()
		<-done
	}
	if got := root.Held(); got != 4*size {
		t.Fatalf("held after four charges of 1 MiB: %d", got)
	}
	if h, err := r.Charge(1); err == nil || !errors.Is(err, sse.ErrEventTooLarge) {
		h.Release()
		t.Fatalf("a charge past the budget: %v, want it refused", err)
	}
	r.Release()
	if got := root.Held(); got != 4*size {
		t.Fatalf("held after the Reader's Release: %d, want the charges kept", got)
	}
	if h, err := r.Charge(size); h != nil || err != nil {
		t.Fatalf("Charge after the Reader's Release: %v, %v; want nothing held", h, err)
	}
	for _, h := range hs {
		h.Release()
	}
	if got := root.Held(); got != 0 {
		t.Fatalf("held after every Release: %d", got)
	}
}

// TestRefusalBlamesWhatKeepsTheRoom: a stream refused room while its own
// caller's Holds (outputs sent to it and not taken yet) keep more of the
// budget than its streams read is the caller's fault (ErrPartyOverShare),
// even on a single stream; a stream whose own event fills the budget stays
// the replica's (ErrBudgetExhausted). Before, both were the replica's.
func TestRefusalBlamesWhatKeepsTheRoom(t *testing.T) {
	const size = 1 << 20
	root := sse.NewBudget(4 << 20)
	root.SetRateFloor(0, 0)
	event := "data: " + strings.Repeat("e", 2*size) + "\n\n"
	r := sse.NewReaderBudget(io.NopCloser(strings.NewReader(event)), 0, root.Part().Party("slow"))
	defer r.Release()
	h, err := r.Charge(3 * size) // a backlog its caller has not taken
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if _, err := r.Next(); !errors.Is(err, sse.ErrPartyOverShare) {
		t.Fatalf("a read refused beside the caller's backlog: %v, want ErrPartyOverShare", err)
	}

	big := sse.NewReaderBudget(io.NopCloser(strings.NewReader("data: "+strings.Repeat("e", 5*size)+"\n\n")), 0, sse.NewBudget(4<<20).Part().Party("caller"))
	defer big.Release()
	if _, err := big.Next(); !errors.Is(err, sse.ErrBudgetExhausted) || errors.Is(err, sse.ErrPartyOverShare) {
		t.Fatalf("an event larger than the budget: %v, want ErrBudgetExhausted (the replica's)", err)
	}
}
