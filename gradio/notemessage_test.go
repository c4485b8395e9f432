package gradio_test

import (
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestNoteStreamMessage: a message of the app's stream that a relay read
// itself (NoteStreamMessage) counts in LastMessage, which a pool reads to
// tell an app busy with relayed calls from a hung one.
func TestNoteStreamMessage(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	c, err := gradio.Connect(t.Context(), sim.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.LastMessage().IsZero() {
		t.Fatalf("LastMessage %v before any stream message, want zero", c.LastMessage())
	}
	before := time.Now()
	c.NoteStreamMessage()
	if got := c.LastMessage(); got.Before(before) || got.After(time.Now()) {
		t.Fatalf("LastMessage %v after NoteStreamMessage at %v, want that moment", got, before)
	}
	if s := c.NewSession(); !s.LastMessage().Equal(c.LastMessage()) {
		t.Fatalf("another session of the app sees %v, want the app's %v", s.LastMessage(), c.LastMessage())
	}
}
