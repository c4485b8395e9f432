package gradiotest

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Streaming inputs (connection "stream", Gradio 5+ modes): the event is
// joined as usual and runs its Handler on the join's data; each chunk POSTed
// to stream/{event_id} runs it again on the chunk's data, every result
// going out as process_streaming; stream/{event_id}/close ends the event
// with a process_completed of the last outputs.

const msgStreaming = "process_streaming"

// inputStream is a streaming event's chunk channel and close signal.
type inputStream struct {
	chunks    chan []json.RawMessage
	done      chan struct{}
	closeOnce sync.Once
}

var streamsMu sync.Mutex // guards event.stream creation

func (ev *event) inputStream() *inputStream {
	streamsMu.Lock()
	defer streamsMu.Unlock()
	if ev.stream == nil {
		ev.stream = &inputStream{chunks: make(chan []json.RawMessage, 16), done: make(chan struct{})}
	}
	return ev.stream
}

// handleStream serves POST stream/{event_id} and stream/{event_id}/close.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request, tail string) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w)
		return
	}
	id, closing := strings.CutSuffix(strings.Trim(tail, "/"), "/close")
	s.mu.Lock()
	ev := s.events[id]
	s.mu.Unlock()
	if ev == nil || !ev.ep.Stream {
		detail(w, http.StatusNotFound, "Event not found")
		return
	}
	st := ev.inputStream()
	if closing {
		st.closeOnce.Do(func() { close(st.done) })
		writeJSON(w, 200, obj{{"msg", "success"}})
		return
	}
	var body struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Data == nil {
		detail(w, http.StatusUnprocessableEntity, "data must be a list")
		return
	}
	select {
	case st.chunks <- body.Data:
		writeJSON(w, 200, obj{{"msg", "success"}})
	case <-st.done:
		detail(w, http.StatusNotFound, "Event not found")
	case <-r.Context().Done():
	}
}

// runStreaming runs a streaming-input event (see above); call holds the
// join's inputs.
func (s *Server) runStreaming(ev *event, call *Call) {
	st := ev.inputStream()
	var last []json.RawMessage
	step := time.Now()
	run := func() bool {
		outs, err := safeHandler(ev.ctx, ev.ep.Handler, call)
		if ev.ctx.Err() != nil {
			return false
		}
		if err == nil {
			last, err = s.storeOutputs(ev, outs)
		}
		if err != nil {
			s.fail(ev, err, last == nil)
			return false
		}
		dur := time.Since(step).Seconds()
		step = time.Now()
		body := obj{{"output", s.outputObj(ev, rawAny(last), true, dur)}, {"success", true}, {"time_limit", nil}}
		s.emitMsg(ev, &message{kind: msgStreaming, eventID: ev.id, body: body, full: last, success: true})
		return true
	}
	if !run() {
		return
	}
	for {
		select {
		case d := <-st.chunks:
			s.mu.Lock()
			ev.data = d
			s.mu.Unlock()
			inputs, err := s.prepareInputs(ev)
			if err != nil {
				s.fail(ev, err, false)
				return
			}
			call.Inputs = inputs
			if !run() {
				return
			}
		case <-st.done:
			s.complete(ev, last, time.Since(ev.started).Seconds(), false)
			return
		case <-ev.ctx.Done():
			return
		}
	}
}
