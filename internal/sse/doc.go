// Package sse reads and writes Server-Sent Events streams (the WHATWG
// "text/event-stream" format) as Gradio and its proxies produce them.
//
//	r := sse.NewReader(resp.Body)
//	for {
//		ev, err := r.Next()
//		if err != nil {
//			return err // io.EOF at a clean end of stream
//		}
//		handle(ev.Type, ev.Data)
//	}
//
// Writing, in an HTTP handler (see writer.go):
//
//	s := sse.Start(w) // status 200, Content-Type, flushed
//	err := s.Event("complete", data)
//
// # Format
//
// Lines end in LF, CRLF or CR. A line "data: x" appends x to the event's
// data (several data lines are joined with "\n"), "event:" sets its type,
// "id:" its id and "retry:" its reconnection delay; a line starting with ":"
// is a comment (proxies use them as keep-alives) and an empty line dispatches
// the event. A single space after the colon is removed. Unknown fields are
// ignored, as the standard requires; the Python Gradio client's data-only
// parser is the cautionary example.
package sse
