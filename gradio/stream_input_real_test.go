package gradio_test

import (
	"bytes"
	"errors"
	"image"
	"image/png"
	"os"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

func pngOf(t *testing.T, w, h int) *bytes.Reader {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b.Bytes())
}

// TestRealStreamingInputs runs against a real Gradio 5+ server serving
// testdata/realgradio/stream_app.py (see docs/COMPATIBILITY.md):
//
//	ROOT=/tmp/realgradio bash testdata/realgradio/start.sh stream_app.py 5.49.1 7894
//	GRADIOPOOL_REAL_STREAM_URL=http://127.0.0.1:7894 go test -run TestRealStreamingInputs ./gradio/
func TestRealStreamingInputs(t *testing.T) {
	url := os.Getenv("GRADIOPOOL_REAL_STREAM_URL")
	if url == "" {
		t.Skip("GRADIOPOOL_REAL_STREAM_URL unset: no real streaming-input app to test against")
	}
	c := connect(t, url)
	defer c.Close()
	ctx := testCtx(t)
	j, err := c.Submit(ctx, "describe", gradio.FileReader("a.png", pngOf(t, 4, 3)))
	if err != nil {
		t.Fatal(err)
	}
	events := j.Events()
	if got := nextOutput(t, events); got != "4x3" {
		t.Fatalf("first output %q, want 4x3", got)
	}
	for _, sz := range [][2]int{{2, 5}, {7, 1}} {
		if err := j.SendChunk(ctx, gradio.FileReader("c.png", pngOf(t, sz[0], sz[1]))); err != nil {
			t.Fatalf("chunk %v: %v", sz, err)
		}
		want := string(rune('0'+sz[0])) + "x" + string(rune('0'+sz[1]))
		if got := nextOutput(t, events); got != want {
			t.Fatalf("output of chunk %v: %q, want %q", sz, got, want)
		}
	}
	if err := j.CloseStream(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := j.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The event ends with the last chunk's output (as the simulator).
	if got := str(t, out[0]); got != "7x1" {
		t.Errorf("final output %q, want 7x1", got)
	}
	// A chunk after the end: 6.25.0 answers 404, 5.49.1 accepts it and
	// drops it; either way the job stays finished.
	var pe *gradio.ProtocolError
	err = j.SendChunk(ctx, gradio.FileReader("late.png", pngOf(t, 1, 1)))
	if err != nil && (!errors.As(err, &pe) || pe.StatusCode != 404) {
		t.Errorf("chunk after the end: %v, want nil or a 404 *ProtocolError", err)
	}
	t.Logf("chunk after the end: %v", err)
	if out2, err := j.Wait(ctx); err != nil || str(t, out2[0]) != "7x1" {
		t.Errorf("after a late chunk the job's result is %s, %v", out2, err)
	}
}
