package gradio_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// nextOutput reads j's events up to the next EventOutput and returns its
// first value.
func nextOutput(t *testing.T, events <-chan gradio.Event) string {
	t.Helper()
	for ev := range events {
		switch ev.Kind {
		case gradio.EventOutput:
			return str(t, ev.Data[0])
		case gradio.EventCompleted, gradio.EventError:
			t.Fatalf("job ended (%v %v) before an output", ev.Kind, ev.Err)
		}
	}
	t.Fatal("events ended before an output")
	return ""
}

func TestStreamingInputs(t *testing.T) {
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio6} {
		t.Run(string(mode), func(t *testing.T) {
			app := gradiotest.DefaultApp()
			app.Handle("listen", func(_ context.Context, c *gradiotest.Call) ([]any, error) {
				s, err := c.String(0)
				return []any{strings.ToUpper(s)}, err
			}, nil, nil).Stream = true
			srv := startSim(t, mode, app, nil)
			c := connect(t, srv.URL)
			defer c.Close()
			ctx := testCtx(t)
			d, err := c.Config().Endpoint("listen")
			if err != nil || !d.Streaming() {
				t.Fatalf("listen: %v, streaming %v", err, d != nil && d.Streaming())
			}
			j, err := c.Submit(ctx, "listen", "a")
			if err != nil {
				t.Fatal(err)
			}
			events := j.Events()
			if got := nextOutput(t, events); got != "A" {
				t.Fatalf("first output %q, want A", got)
			}
			for _, chunk := range []string{"b", "cd"} {
				if err := j.SendChunk(ctx, chunk); err != nil {
					t.Fatalf("chunk %q: %v", chunk, err)
				}
				if got, want := nextOutput(t, events), strings.ToUpper(chunk); got != want {
					t.Fatalf("output of chunk %q: %q, want %q", chunk, got, want)
				}
			}
			if err := j.CloseStream(ctx); err != nil {
				t.Fatal(err)
			}
			out, err := j.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := str(t, out[0]); got != "CD" {
				t.Errorf("final output %q, want CD (the last chunk's)", got)
			}
			var pe *gradio.ProtocolError
			if err := j.SendChunk(ctx, "late"); !errors.As(err, &pe) || pe.StatusCode != 404 {
				t.Errorf("chunk after the end: %v, want a 404 *ProtocolError", err)
			}
			// A job of an ordinary endpoint takes no chunks.
			u, err := c.Submit(ctx, "upper", "x")
			if err != nil {
				t.Fatal(err)
			}
			if err := u.SendChunk(ctx, "y"); !errors.Is(err, gradio.ErrNotStreaming) {
				t.Errorf("SendChunk on upper: %v, want ErrNotStreaming", err)
			}
			if err := u.CloseStream(ctx); !errors.Is(err, gradio.ErrNotStreaming) {
				t.Errorf("CloseStream on upper: %v, want ErrNotStreaming", err)
			}
			if _, err := u.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
