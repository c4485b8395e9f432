package gradio_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
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
	cancelled, gate := make(chan struct{}), make(chan struct{})
	defer close(gate)
	app := gradiotest.NewApp()
	app.HandleGenerator("flood", func(ctx context.Context, _ *gradiotest.Call, yield func(...any) error) error {
		for i := range 40 {
			if err := yield(strconv.Itoa(i) + strings.Repeat("f", 1<<20)); err != nil {
				close(cancelled)
				return err
			}
		}
		select { // a long call: it ends by its cancel, or at the test's end
		case <-ctx.Done():
			close(cancelled)
			return ctx.Err()
		case <-gate:
			return nil
		}
	}, []gradiotest.Component{gradiotest.Number("n")}, []gradiotest.Component{gradiotest.Textbox("out")})
	srv := gradiotest.NewServer(app)
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
	case <-cancelled:
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
