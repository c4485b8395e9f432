package sse

import (
	"bytes"
	"errors"
	"net/http"
)

// Writer writes an event stream to an HTTP response, flushing after every
// record so that each reaches the client at once. It is the one writer of
// the module: the gateway's /v1 streams, the front door's relay and the
// simulator's queue/data and call streams all use it. It is not safe for
// concurrent use.
//
// The first write error is kept: later writes do nothing and return it.
type Writer struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
	err error
}

// Start writes the header of an event stream (status 200) and returns its
// Writer. Content-Type is "text/event-stream" unless the caller set one
// (the simulator adds "; charset=utf-8" as Gradio does);
// X-Accel-Buffering: no stops nginx from buffering the stream. Other
// headers, such as Cache-Control, are the caller's to set before.
func Start(w http.ResponseWriter) *Writer {
	h := w.Header()
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "text/event-stream")
	}
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &Writer{w: w, rc: http.NewResponseController(w)}
	s.flush()
	return s
}

// Data writes one event of the default type: "data: b" and the blank line
// that dispatches it. Each line of b gets its own "data:" field, so a
// reader joins them back into b.
func (s *Writer) Data(b []byte) error { return s.record("", b) }

// Event writes one event of type name with data b.
func (s *Writer) Event(name string, b []byte) error { return s.record(name, b) }

// Comment writes a comment line (": text"), which readers ignore: a
// keep-alive for proxies that cut idle connections.
func (s *Writer) Comment(text string) error {
	if s.err != nil {
		return s.err
	}
	s.buf.Reset()
	s.buf.WriteString(": ")
	s.buf.WriteString(text)
	s.buf.WriteString("\n\n")
	return s.send()
}

// Err is the first write error, nil while the stream is intact.
func (s *Writer) Err() error { return s.err }

// DataAll writes several events of the default type in one write and
// one flush: a client reads them together, in order, as one chunk.
func (s *Writer) DataAll(bs ...[]byte) error {
	if s.err != nil {
		return s.err
	}
	s.buf.Reset()
	for _, b := range bs {
		s.appendRecord("", b)
	}
	return s.send()
}

func (s *Writer) record(name string, b []byte) error {
	if s.err != nil {
		return s.err
	}
	s.buf.Reset()
	s.appendRecord(name, b)
	return s.send()
}

// appendRecord adds one event to the buffer.
func (s *Writer) appendRecord(name string, b []byte) {
	if name != "" {
		s.buf.WriteString("event: ")
		s.buf.WriteString(name)
		s.buf.WriteByte('\n')
	}
	for {
		line, rest, more := bytes.Cut(b, []byte("\n"))
		s.buf.WriteString("data: ")
		s.buf.Write(line)
		s.buf.WriteByte('\n')
		if !more {
			break
		}
		b = rest
	}
	s.buf.WriteByte('\n')
}

// send writes the buffered record in one Write and flushes it.
func (s *Writer) send() error {
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		s.err = err
		return err
	}
	s.flush()
	return s.err
}

// flush pushes the record to the client; a ResponseWriter that cannot
// flush (http.ErrNotSupported) is not an error: its records go out when
// the handler returns.
func (s *Writer) flush() {
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) && s.err == nil {
		s.err = err
	}
}
