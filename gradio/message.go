package gradio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// message is one record of a queue stream (sse v0 to v3; server_messages.py).
type message struct {
	Msg             string          `json:"msg"`
	EventID         *string         `json:"event_id"`
	Rank            *int            `json:"rank"`
	QueueSize       *int            `json:"queue_size"`
	RankETA         *float64        `json:"rank_eta"`
	ETA             *float64        `json:"eta"`
	ProgressData    []Progress      `json:"progress_data"`
	Log             string          `json:"log"`
	Level           string          `json:"level"`
	Title           *string         `json:"title"`
	Output          json.RawMessage `json:"output"`
	Success         *bool           `json:"success"`
	Message         string          `json:"message"`
	SessionNotFound bool            `json:"session_not_found"`
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

// output is the "output" object of process_generating/completed.
type output struct {
	Data     []json.RawMessage `json:"data"`
	Error    json.RawMessage   `json:"error"`
	Title    *string           `json:"title"`
	Duration *float64          `json:"duration"`
	Visible  *bool             `json:"visible"`
	hasError bool
}

func parseOutput(raw json.RawMessage) (*output, error) {
	var o output
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return &o, nil
	}
	// Detect the "error" key even when its value is null.
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, fmt.Errorf("output is not an object: %w", err)
	}
	if d, ok := keys["data"]; ok {
		if err := json.Unmarshal(d, &o.Data); err != nil {
			return nil, fmt.Errorf("output.data: %w", err)
		}
		if o.Data == nil {
			o.Data = []json.RawMessage{}
		}
	}
	if e, ok := keys["error"]; ok {
		o.hasError, o.Error = true, e
	}
	if t, ok := keys["title"]; ok {
		_ = json.Unmarshal(t, &o.Title)
	}
	if o.hasError {
		if d, ok := keys["duration"]; ok {
			_ = json.Unmarshal(d, &o.Duration)
		}
		if v, ok := keys["visible"]; ok {
			_ = json.Unmarshal(v, &o.Visible)
		}
	}
	return &o, nil
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
	m, err := decodeMessage(data)
	if err != nil {
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
		out, err := parseOutput(m.Output)
		if err != nil || out.isError() || (m.Success != nil && !*m.Success) {
			return Event{Kind: EventError}, true
		}
		return Event{Kind: EventCompleted}, true
	}
	return Event{}, false
}
