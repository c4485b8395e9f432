package gradio_test

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestSlowEventsReaderFailsTheJob: a caller that asked for a job's Events
// and reads them slower than the app sends them (here: not at all while
// a generator streams 40 outputs of 1 MiB) does not make the client keep
// them all: past 16 MiB behind, the job fails with ErrSlowReader, its
// queued events are dropped, and the call is cancelled at the app. Before,
// every output waited for the reader (a /v1/submit caller reading at a
// trickle kept the gateway's memory growing as fast as the app streamed).
func TestSlowEventsReaderFailsTheJob(t *testing.T) {
	gate := make(chan struct{})
	defer close(gate)
	flood := gradiotest.NewFlood(40, 1<<20, gate)
	srv := gradiotest.NewServer(flood.App())
	defer srv.Close()
	c := connect(t, srv.URL)
	defer c.Close()
	ctx := testCtx(t)
	j, err := c.Submit(ctx, "flood", 0)
	if err != nil {
		t.Fatal(err)
	}
	events := j.Events() // a reader that takes nothing while the app streams
	if _, err := j.Wait(ctx); !errors.Is(err, gradio.ErrSlowReader) {
		t.Fatalf("Wait: %v, want ErrSlowReader", err)
	}
	select {
	case <-flood.Cancelled:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("the app's call was not cancelled")
	}
	var last gradio.Event
	n := 0
	for ev := range events {
		last = ev
		n++
	}
	if last.Kind != gradio.EventError || !errors.Is(last.Err, gradio.ErrSlowReader) {
		t.Errorf("last event %v (%v), want the error", last.Kind, last.Err)
	}
	if n > 20 {
		t.Errorf("the reader still got %d events after the job failed, want those taken before at most", n)
	}
}

// floodUnread submits a call of a gradiotest.Flood(n, size) on a client charging
// budget; yielded counts the outputs the app sent. The server and client
// close with the test.
func floodUnread(t *testing.T, ctx context.Context, mode gradiotest.Mode, n, size int, budget *gradio.EventBudget, gate <-chan struct{}) (*gradio.Job, *atomic.Int32) {
	t.Helper()
	flood := gradiotest.NewFlood(n, size, gate)
	srv := gradiotest.NewUnstartedServer(flood.App())
	if mode != "" {
		srv.Mode = mode
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := gradio.Connect(ctx, srv.URL, gradio.WithEventBudget(budget))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	j, err := c.Submit(ctx, "flood", 0)
	if err != nil {
		t.Fatal(err)
	}
	return j, &flood.Yielded
}

// waitHeld waits until cond holds of the budget's bytes held; a hang
// guard, not a measure.
func waitHeld(t *testing.T, b *gradio.EventBudget, cond func(int64) bool, what string) {
	t.Helper()
	for i := 0; !cond(b.Held()); i++ {
		if i > 20000 {
			t.Fatalf("%s: the budget holds %d bytes", what, b.Held())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSlowReaderBacklogCountsInEventBudget (issue 33 item 2): a
// generator's outputs waiting for a slow Events reader are counted in the
// event budget, charged to the call's party, until the reader takes them.
// Before, they were counted only while their stream read them: eight
// outputs of 1 MiB queued for a reader held 8 MiB outside the budget (a
// caller reading many calls' streams slowly held 16 MiB a call).
func TestSlowReaderBacklogCountsInEventBudget(t *testing.T) {
	for _, mode := range []gradiotest.Mode{"", gradiotest.Gradio3WS} {
		t.Run(cmp.Or(string(mode), "default"), func(t *testing.T) { slowReaderBacklogCounts(t, mode) })
	}
}

func slowReaderBacklogCounts(t *testing.T, mode gradiotest.Mode) {
	const n, size = 8, 1 << 20
	gate := make(chan struct{})
	budget := gradio.NewEventBudget(64 << 20)
	ctx := testCtx(t)
	j, _ := floodUnread(t, ctx, mode, n, size, budget, gate)
	events := j.Events() // a reader that takes nothing yet
	waitHeld(t, budget, func(h int64) bool { return h >= (n-1)*size }, "outputs queued for the reader")
	for got := 0; got < n; {
		ev := <-events
		if ev.Kind == gradio.EventError || ev.Kind == gradio.EventCompleted {
			t.Fatalf("the job ended before its outputs were read: %v", ev.Err)
		}
		if ev.Kind == gradio.EventOutput {
			got++
		}
	}
	waitHeld(t, budget, func(h int64) bool { return h == 0 }, "every output read")
	close(gate)
	if _, err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for range events {
	}
}

// TestSlowReaderBacklogRefusedRoom: a reader that falls behind by more
// than the event budget holds (4 MiB here, under the 16 MiB bound of a
// job's backlog) fails its job as the caller's fault, not the app's: its
// backlog is refused room (ErrSlowReader), or the stream's next event is
// while the backlog keeps the room (ErrEventShare), after at most a few
// outputs past the budget. Before, the backlog grew to 16 MiB whatever
// the budget, and a refused read was the app's fault.
func TestSlowReaderBacklogRefusedRoom(t *testing.T) {
	const n, size = 40, 1 << 20
	gate := make(chan struct{})
	defer close(gate)
	budget := gradio.NewEventBudget(4 << 20)
	ctx := testCtx(t)
	j, yielded := floodUnread(t, ctx, "", n, size, budget, gate)
	events := j.Events()
	// Refused either for the backlog (ErrSlowReader) or for the stream's
	// next event while the backlog keeps the room (ErrEventShare): both
	// the caller's fault, never the app's bare ErrEventTooLarge.
	_, err := j.Wait(ctx)
	if !errors.Is(err, gradio.ErrSlowReader) && !errors.Is(err, gradio.ErrEventShare) {
		t.Fatalf("Wait: %v, want the reader's fault (ErrSlowReader or ErrEventShare), not the app's", err)
	}
	t.Logf("failed with: %v", err)
	for range events {
	}
	if y := yielded.Load(); y >= 12 {
		t.Errorf("the app yielded %d outputs of 1 MiB before the job failed, want the budget's 4 and a few in flight", y)
	}
	waitHeld(t, budget, func(h int64) bool { return h == 0 }, "the failed job's backlog given back")
}
