package gradio

import (
	"strings"
	"testing"
)

// BenchmarkDecodeLargeCompletion decodes one process_completed message of
// a 16 MB output as a job does (the message, then its output), to show
// how many times a large output is copied on its way in.
func BenchmarkDecodeLargeCompletion(b *testing.B) {
	msg := []byte(`{"msg":"process_completed","event_id":"e1","output":{"data":["` +
		strings.Repeat("x", 16<<20) + `",1],"is_generating":false,"duration":0.1},"success":true}`)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := decodeMessage(msg)
		if err != nil {
			b.Fatal(err)
		}
		out, err := m.Output.parsed()
		if err != nil || len(out.Data) != 2 {
			b.Fatal(err, len(out.Data))
		}
	}
}

// BenchmarkLoadEventLargeCompletion reads the load of one relayed
// process_completed of a 16 MB output (gradio.LoadEvent, called by a
// gateway's front door for every message it relays).
func BenchmarkLoadEventLargeCompletion(b *testing.B) {
	msg := []byte(`{"msg":"process_completed","event_id":"e1","output":{"data":["` +
		strings.Repeat("x", 16<<20) + `",1],"is_generating":false,"duration":0.1},"success":true}`)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if ev, ok := LoadEvent(msg); !ok || ev.Kind != EventCompleted {
			b.Fatal(ev, ok)
		}
	}
}
