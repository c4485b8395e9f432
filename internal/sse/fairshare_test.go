package sse_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// hostileStream is a stream that sends n bytes of one data line and then
// nothing (or a byte every trickle), until its reader closes it.
func hostileStream(t *testing.T, n int, trickle time.Duration) io.ReadCloser {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer pw.Close()
		if _, err := pw.Write([]byte("data: ")); err != nil {
			return
		}
		chunk := bytes.Repeat([]byte("x"), 16<<10)
		for sent := 0; sent < n; sent += len(chunk) {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		for trickle > 0 {
			time.Sleep(trickle)
			if _, err := pw.Write([]byte("x")); err != nil {
				return
			}
		}
		<-done // held open until the test ends
	}()
	t.Cleanup(func() { pr.Close(); close(done) })
	return pr
}

// waitHeld waits (bounded) until b holds at least n bytes.
func waitHeld(t *testing.T, b *sse.Budget, n int64) {
	t.Helper()
	for i := 0; b.Held() < n; i++ {
		if i > 2000 {
			t.Fatalf("the budget holds %d bytes, waited for %d", b.Held(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBudgetFairShare (issue 33): a hostile part (replica) whose two
// streams hold nearly the whole budget with unfinished lines does not make
// a healthy part's event fail: the healthy part is under its fair share,
// so it takes the room back, and the hostile part's largest stream ends
// with ErrBudgetReclaimed (an ErrEventTooLarge: the hostile replica's
// fault). A part over its own fair share gets ErrBudgetExhausted instead
// and takes nothing from anyone.
func TestBudgetFairShare(t *testing.T) {
	const total = 8 << 20
	root := sse.NewBudget(total)
	root.SetRateFloor(0, 0)
	hostile, healthy := root.Part(), root.Part()
	errs := make(chan error, 2)
	for range 2 {
		r := sse.NewReaderBudget(hostileStream(t, 3<<20+512<<10, 0), 0, hostile)
		go func() {
			_, err := r.Next()
			r.Release()
			errs <- err
		}()
	}
	waitHeld(t, hostile, 6<<20)

	// Without parts this event would not fit: it is held twice while it
	// is read (its line, then its data), 3 MiB, and 1 MiB is free. Its
	// part's fair share is half the budget, 4 MiB.
	event := "data: " + strings.Repeat("y", 3<<19) + "\n\n"
	r := sse.NewReaderBudget(strings.NewReader(event), 0, healthy)
	ev, err := r.Next()
	if err != nil || len(ev.Data) != 3<<19 {
		t.Fatalf("the healthy part's event: %d bytes, %v", len(ev.Data), err)
	}
	r.Release()
	if err := <-errs; !errors.Is(err, sse.ErrBudgetReclaimed) || !errors.Is(err, sse.ErrEventTooLarge) {
		t.Fatalf("the hostile stream cut for room: %v, want ErrBudgetReclaimed", err)
	}

	// The hostile part, over its share, cannot take room back from the
	// healthy one: its own stream fails.
	keep := sse.NewReaderBudget(hostileStream(t, 3<<20, 0), 0, healthy)
	go func() { _, _ = keep.Next() }()
	waitHeld(t, healthy, 2<<20)
	more := sse.NewReaderBudget(strings.NewReader("data: "+strings.Repeat("z", 4<<20)+"\n\n"), 0, hostile)
	if _, err := more.Next(); !errors.Is(err, sse.ErrBudgetExhausted) {
		t.Errorf("a part over its share taking more: %v, want ErrBudgetExhausted", err)
	}
	more.Release()
	if h := healthy.Held(); h < 2<<20 {
		t.Errorf("the healthy part lost its bytes to a part over its share: holds %d", h)
	}
}

// TestBudgetRateFloor (issue 33): a stream that holds budget bytes while
// trickling is cut with ErrTooSlow, however long it keeps sending a byte
// now and then; its bytes go back. A stream sending at network speed is
// not.
func TestBudgetRateFloor(t *testing.T) {
	root := sse.NewBudget(64 << 20)
	root.SetRateFloor(64<<10, 300*time.Millisecond) // about 19 KiB per window, scaled down from 32 KiB/s over 10 s
	part := root.Part()
	r := sse.NewReaderBudget(hostileStream(t, 1<<20, 10*time.Millisecond), 0, part)
	if _, err := r.Next(); !errors.Is(err, sse.ErrTooSlow) || !errors.Is(err, sse.ErrEventTooLarge) {
		t.Fatalf("a trickling stream: %v, want ErrTooSlow", err)
	}
	if h := root.Held(); h != 0 {
		t.Errorf("a cut stream still holds %d bytes", h)
	}
	r.Release()
	fast := sse.NewReaderBudget(io.NopCloser(strings.NewReader("data: "+strings.Repeat("f", 8<<20)+"\n\n")), 0, part)
	if ev, err := fast.Next(); err != nil || len(ev.Data) != 8<<20 {
		t.Errorf("a fast stream: %d bytes, %v", len(ev.Data), err)
	}
	fast.Release()
	if h := root.Held(); h != 0 {
		t.Errorf("after Release the budget counts %d bytes", h)
	}
}
