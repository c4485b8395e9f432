package gradio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// message is one record of a queue stream (sse v0 to v3; server_messages.py).
type message struct {
	Msg             string      `json:"msg"`
	EventID         *string     `json:"event_id"`
	Rank            *int        `json:"rank"`
	QueueSize       *int        `json:"queue_size"`
	RankETA         *float64    `json:"rank_eta"`
	ETA             *float64    `json:"eta"`
	ProgressData    []Progress  `json:"progress_data"`
	Log             string      `json:"log"`
	Level           string      `json:"level"`
	Title           *string     `json:"title"`
	Output          outputField `json:"output"`
	Success         *bool       `json:"success"`
	Message         string      `json:"message"`
	SessionNotFound bool        `json:"session_not_found"`

	// hold charges the decoded output of a large event to its stream's
	// party (holdEvent) until the job that takes it is released; nil for
	// a small one. A job takes it (Job.handle), or the reader releases it
	// once the message is dispatched.
	hold *sse.Hold
	// src is the stream m was read from (an event stream's Reader, a
	// WebSocket's Meter), for a job that keeps more than m's own bytes
	// of it (Job.emitOutput).
	src interface {
		Charge(n int) (*sse.Hold, error)
	}
}

// releaseHold gives back what m still holds of the event budget: its hold,
// unless a job's result took it (Job.keep).
func (m *message) releaseHold() {
	m.hold.Release()
	m.hold = nil
}

// decodeMessage parses one data: payload. Payloads that are not JSON
// objects (e.g. the heartbeat stream's "ALIVE") give a message with Msg "".
func decodeMessage(b []byte) (*message, error) {
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// outputField decodes a message's output in the message's own pass: an
// output of many megabytes is then copied once, into output.Data, where a
// json.RawMessage kept for later would copy it once more and parsing that
// a third time. A malformed output is kept as an error for the message's
// job alone, never an error of the stream that carries other jobs too.
type outputField struct {
	out *output
	err error
}

func (f *outputField) UnmarshalJSON(b []byte) error {
	f.out, f.err = parseOutput(b)
	return nil
}

// parsed returns the output; a message without one has an empty output.
func (f *outputField) parsed() (*output, error) {
	if f.out == nil && f.err == nil {
		return &output{}, nil
	}
	return f.out, f.err
}

// output is the "output" object of process_generating/completed.
type output struct {
	Data         []json.RawMessage // nil when there is no "data" key ({} after /cancel)
	Error        json.RawMessage   // set when there is an "error" key, even a null one
	Title        *string
	Duration     *float64
	Visible      *bool
	RenderConfig json.RawMessage // Gradio 5's gr.render: the render_config
	hasError     bool
}

// outputWire is output as sent. Fields other than data are decoded leniently
// after it: a title of the wrong type is ignored, as Gradio's clients do.
type outputWire struct {
	Data         outputData      `json:"data"`
	Error        json.RawMessage `json:"error"`
	Title        json.RawMessage `json:"title"`
	Duration     json.RawMessage `json:"duration"`
	Visible      json.RawMessage `json:"visible"`
	RenderConfig json.RawMessage `json:"render_config"`
}

// outputData tells a "data": null (an empty result, elems empty) from no
// "data" key (elems nil).
type outputData struct {
	elems []json.RawMessage
}

func (d *outputData) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &d.elems); err != nil {
		return fmt.Errorf("output.data: %w", err)
	}
	if d.elems == nil {
		d.elems = []json.RawMessage{}
	}
	return nil
}

func parseOutput(raw []byte) (*output, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return &output{}, nil
	}
	if raw[0] != '{' {
		return nil, fmt.Errorf("output is not an object: %.40s", raw)
	}
	var w outputWire
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, err
	}
	o := &output{Data: w.Data.elems, RenderConfig: w.RenderConfig}
	if w.Error != nil {
		o.hasError, o.Error = true, w.Error
		_ = json.Unmarshal(w.Duration, &o.Duration)
		_ = json.Unmarshal(w.Visible, &o.Visible)
	}
	_ = json.Unmarshal(w.Title, &o.Title)
	return o, nil
}

func (o *output) isError() bool { return o.hasError }

// appError builds the *AppError of a failed output; msgTitle is the
// message's top-level title.
func (o *output) appError(msgTitle *string) error {
	e := &AppError{Visible: o.Visible == nil || *o.Visible, Duration: seconds(o.Duration)}
	switch {
	case o.Title != nil:
		e.Title = *o.Title
	case msgTitle != nil:
		e.Title = *msgTitle
	}
	var s *string
	if len(o.Error) > 0 {
		if err := json.Unmarshal(o.Error, &s); err != nil {
			// Not a string: keep the JSON text.
			str := string(o.Error)
			s = &str
		}
	}
	if s == nil {
		e.Hidden = true
		e.Message = hiddenErrorMsg
	} else {
		e.Message = *s
	}
	return e
}

func decodeAny(raw json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

var errStreamEnded = errors.New("stream ended")

// LoadEvent decodes one message of a queue/data stream (the JSON of one
// SSE data line) into the Event a job's EventHook gets for it, for the
// messages that tell the queue's load: estimation (EventQueued: Rank,
// QueueSize, ETA), process_starts (EventStarted: ETA) and
// process_completed (EventCompleted, or EventError when the call failed;
// no Data). Any other message, or data that is not one, gives false. It is
// for callers that relay an app's stream themselves (a gateway's front
// door) and feed what they relay to a pool's bookkeeping
// (pool.Slot.Observe).
func LoadEvent(data []byte) (Event, bool) {
	var m struct {
		Msg       string     `json:"msg"`
		Rank      *int       `json:"rank"`
		QueueSize *int       `json:"queue_size"`
		RankETA   *float64   `json:"rank_eta"`
		ETA       *float64   `json:"eta"`
		Success   *bool      `json:"success"`
		Output    loadOutput `json:"output"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return Event{}, false
	}
	switch m.Msg {
	case "estimation":
		ev := Event{Kind: EventQueued, Rank: -1, QueueSize: -1, ETA: seconds(m.RankETA)}
		if m.Rank != nil {
			ev.Rank = *m.Rank
		}
		if m.QueueSize != nil {
			ev.QueueSize = *m.QueueSize
		}
		return ev, true
	case "process_starts":
		return Event{Kind: EventStarted, ETA: seconds(m.ETA)}, true
	case "process_completed":
		if m.Output.failed || (m.Success != nil && !*m.Success) {
			return Event{Kind: EventError}, true
		}
		return Event{Kind: EventCompleted}, true
	}
	return Event{}, false
}

// loadOutput is what LoadEvent reads of an output: whether it failed (an
// error key, or an output a job could not parse). Its data is looked at in
// place, never copied: a front door relays outputs of many megabytes and
// asks only how the call ended.
type loadOutput struct{ failed bool }

func (o *loadOutput) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	var w struct {
		Data  listShape       `json:"data"`
		Error json.RawMessage `json:"error"`
	}
	o.failed = b[0] != '{' || json.Unmarshal(b, &w) != nil || w.Error != nil || w.Data.notList
	return nil
}

// listShape notes whether a JSON value is neither a list nor null,
// without copying it.
type listShape struct{ notList bool }

func (l *listShape) UnmarshalJSON(b []byte) error {
	l.notList = b[0] != '[' && string(b) != "null"
	return nil
}
