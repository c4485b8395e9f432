package sse_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// TestWriterRoundTrip: what the Writer writes, the Reader reads back,
// multi-line data included; headers are those of an event stream.
func TestWriterRoundTrip(t *testing.T) {
	rec := httptest.NewRecorder()
	s := sse.Start(rec)
	for _, err := range []error{
		s.Data([]byte(`{"msg":"estimation"}`)),
		s.Comment("keep-alive"),
		s.Event("complete", []byte("line one\nline two")),
		s.Data([]byte("ALIVE")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	if rec.Header().Get("X-Accel-Buffering") != "no" || !rec.Flushed {
		t.Error("stream not marked unbuffered or not flushed")
	}
	want := "data: {\"msg\":\"estimation\"}\n\n: keep-alive\n\nevent: complete\ndata: line one\ndata: line two\n\ndata: ALIVE\n\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("wrote %q, want %q", got, want)
	}
	r := sse.NewReader(strings.NewReader(want))
	for _, w := range []struct{ typ, data string }{{"", `{"msg":"estimation"}`}, {"complete", "line one\nline two"}, {"", "ALIVE"}} {
		ev, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != w.typ || string(ev.Data) != w.data {
			t.Errorf("read %q %q, want %q %q", ev.Type, ev.Data, w.typ, w.data)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("end: %v", err)
	}
}

// TestWriterKeepsCallerContentType: a Content-Type set before Start stays.
func TestWriterKeepsCallerContentType(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	sse.Start(rec)
	if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
}

type brokenWriter struct {
	http.ResponseWriter
	writes int
}

var errGone = errors.New("client gone")

func (b *brokenWriter) Write(p []byte) (int, error) {
	b.writes++
	if b.writes > 1 {
		return 0, errGone
	}
	return len(p), nil
}

// TestWriterKeepsFirstError: after a failed write nothing more is written
// and every call returns the first error.
func TestWriterKeepsFirstError(t *testing.T) {
	bw := &brokenWriter{ResponseWriter: httptest.NewRecorder()}
	s := sse.Start(bw)
	if err := s.Data([]byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := s.Data([]byte("two")); !errors.Is(err, errGone) {
		t.Fatalf("second write: %v", err)
	}
	if err := s.Event("x", []byte("three")); !errors.Is(err, errGone) || bw.writes != 2 {
		t.Fatalf("after the error: %v, %d writes", err, bw.writes)
	}
	if !errors.Is(s.Err(), errGone) {
		t.Fatal(s.Err())
	}
}

// writeCounter counts the Writes and Flushes a response gets.
type writeCounter struct {
	*httptest.ResponseRecorder
	writes, flushes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.ResponseRecorder.Write(p)
}

func (w *writeCounter) Flush() {
	w.flushes++
	w.ResponseRecorder.Flush()
}

// TestWriterDataAllOneWrite: DataAll's events leave in one Write and one
// Flush (the front door ends a stream with a call's completion and
// close_stream together, as Gradio does), and read back in order.
func TestWriterDataAllOneWrite(t *testing.T) {
	w := &writeCounter{ResponseRecorder: httptest.NewRecorder()}
	s := sse.Start(w)
	w.writes, w.flushes = 0, 0
	if err := s.DataAll([]byte(`{"msg":"process_completed"}`), []byte("two\nlines"), []byte(`{"msg":"close_stream"}`)); err != nil {
		t.Fatal(err)
	}
	if w.writes != 1 || w.flushes != 1 {
		t.Errorf("%d writes and %d flushes, want one of each", w.writes, w.flushes)
	}
	rd := sse.NewReader(w.Body)
	defer rd.Release()
	for _, want := range []string{`{"msg":"process_completed"}`, "two\nlines", `{"msg":"close_stream"}`} {
		ev, err := rd.Next()
		if err != nil || string(ev.Data) != want {
			t.Fatalf("read %q %v, want %q", ev.Data, err, want)
		}
	}
}
