package sse_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// TestBudgetBoundsManyStreams: many streams, each sending a line that never
// ends and stays under the per-line limit, together hold no more than the
// shared Budget (plus each Reader's allowance and the growth step that
// was refused); past it Next fails with ErrBudgetExhausted, which is an
// ErrEventTooLarge. Released readers give every byte back.
func TestBudgetBoundsManyStreams(t *testing.T) {
	const (
		streams = 16
		limit   = 4 << 20 // per line: 16 streams could hold 64 MiB without the budget
		total   = 8 << 20
	)
	b := sse.NewBudget(total)
	readers := make([]*sse.Reader, streams)
	failed := 0
	for i := range readers {
		// Each stream offers 3 MiB of one line, under the line limit.
		src := &endless{pattern: []byte("x"), n: 3 << 20}
		readers[i] = sse.NewReaderBudget(src, limit, b)
		_, err := readers[i].Next()
		switch {
		case errors.Is(err, sse.ErrBudgetExhausted):
			if !errors.Is(err, sse.ErrEventTooLarge) {
				t.Fatalf("%v is not an ErrEventTooLarge", err)
			}
			failed++
		case err == io.EOF: // the whole line was held, then dropped at EOF
		default:
			t.Fatalf("stream %d: Next = %v", i, err)
		}
		if h := b.Held(); h > total {
			t.Fatalf("held %d bytes, budget %d", h, total)
		}
	}
	if failed == 0 {
		t.Fatalf("no stream met the budget: %d streams of 3 MiB within %d MiB", streams, total>>20)
	}
	for _, r := range readers {
		r.Release()
	}
	if h := b.Held(); h != 0 {
		t.Fatalf("after Release the budget still counts %d bytes", h)
	}
}

// TestBudgetFreedAfterLargeEvent: a large event is charged while it is read
// and given back once the caller asks for the next one, so a long-lived
// stream does not keep a share it no longer uses; small events are never
// charged.
func TestBudgetFreedAfterLargeEvent(t *testing.T) {
	b := sse.NewBudget(4 << 20)
	big := strings.Repeat("y", 1<<20)
	in := "data: " + big + "\n\n" + "data: small\n\n" + "data: " + big + "\n\n"
	r := sse.NewReaderBudget(strings.NewReader(in), 0, b)
	defer r.Release()
	e, err := r.Next()
	if err != nil || len(e.Data) != len(big) {
		t.Fatalf("first event: %d bytes, %v", len(e.Data), err)
	}
	if b.Held() == 0 {
		t.Fatal("a 1 MiB event was not charged")
	}
	if e, err = r.Next(); err != nil || string(e.Data) != "small" {
		t.Fatalf("second event: %q, %v", e.Data, err)
	}
	if h := b.Held(); h != 0 {
		t.Fatalf("while a small event is read, %d bytes are still charged", h)
	}
	if e, err = r.Next(); err != nil || len(e.Data) != len(big) {
		t.Fatalf("third event: %d bytes, %v", len(e.Data), err)
	}
}

// TestBudgetRefusedStreamsLeaveRoom: a stream refused by a full Budget
// does not block the others for good: once the hog is released, another
// large event fits, in a budget of little more than twice its size (its
// line, then its data, are held one after the other, never together with
// their copy).
func TestBudgetRefusedStreamsLeaveRoom(t *testing.T) {
	b := sse.NewBudget(2<<20 + 256<<10)
	hog := sse.NewReaderBudget(&endless{pattern: []byte("x"), n: 64 << 20}, 0, b)
	if _, err := hog.Next(); !errors.Is(err, sse.ErrBudgetExhausted) {
		t.Fatalf("hog: Next = %v, want ErrBudgetExhausted", err)
	}
	in := "data: " + strings.Repeat("z", 1<<20) + "\n\n"
	r := sse.NewReaderBudget(strings.NewReader(in), 0, b)
	if _, err := r.Next(); !errors.Is(err, sse.ErrBudgetExhausted) {
		t.Fatalf("while the hog holds the budget: Next = %v, want ErrBudgetExhausted", err)
	}
	r.Release()
	hog.Release()
	r = sse.NewReaderBudget(strings.NewReader(in), 0, b)
	defer r.Release()
	if e, err := r.Next(); err != nil || len(e.Data) != 1<<20 {
		t.Fatalf("after the hog's release: %d bytes, %v", len(e.Data), err)
	}
}

// TestBudgetBoundsEndlessEvent: data lines that never meet the blank line
// are charged as they accumulate, and stop at the budget (under the
// per-event limit) with ErrBudgetExhausted.
func TestBudgetBoundsEndlessEvent(t *testing.T) {
	b := sse.NewBudget(1 << 20)
	src := &endless{pattern: []byte("data: 0123456789abcdef\n"), n: 8 << 20}
	r := sse.NewReaderBudget(src, 4<<20, b)
	if _, err := r.Next(); !errors.Is(err, sse.ErrBudgetExhausted) {
		t.Fatalf("Next = %v, want ErrBudgetExhausted", err)
	}
	if h := b.Held(); h > 1<<20 {
		t.Fatalf("held %d bytes, budget %d", h, 1<<20)
	}
	if read := 8<<20 - src.n; read > 2<<20 {
		t.Errorf("read %d bytes before giving up", read)
	}
	r.Release()
	if h := b.Held(); h != 0 {
		t.Fatalf("after Release the budget still counts %d bytes", h)
	}
}
