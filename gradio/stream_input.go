package gradio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Streaming inputs (Gradio 5+, `connection: "stream"`: a webcam's or a
// microphone's .stream() event): the event is joined as any call (Submit),
// then each new chunk of inputs is POSTed to {prefix}/stream/{event_id}
// and the app answers each with a process_streaming output (an
// EventOutput); {prefix}/stream/{event_id}/close ends the event, whose
// final output then completes the Job. This is the JS client's send_chunk
// and close_stream.

// ErrNotStreaming is returned by SendChunk and CloseStream for a job whose
// endpoint does not take streaming inputs, or that has no event id yet.
var ErrNotStreaming = errors.New("gradio: not a streaming-input job")

// Streaming reports whether d takes streaming inputs (connection "stream").
func (d *Dependency) Streaming() bool { return d.Connection == "stream" }

func (j *Job) streamTarget() (string, error) {
	if !j.dep.Streaming() {
		return "", fmt.Errorf("%w: %s has connection %q", ErrNotStreaming, j.endpoint, j.dep.Connection)
	}
	if j.s.app.cfg.Protocol != protocolSSEv3 {
		return "", fmt.Errorf("%w: protocol %s", ErrNotStreaming, j.s.app.cfg.Protocol)
	}
	id := j.ID()
	if id == "" {
		return "", fmt.Errorf("%w: the job has no event id (not joined)", ErrNotStreaming)
	}
	return id, nil
}

// SendChunk sends the next chunk of inputs (the same arguments Submit
// takes) to a running streaming-input job. The app answers it with an
// EventOutput on the job's events. It fails with ErrNotStreaming for other
// jobs and with a *ProtocolError (status 404) once the app has ended the
// event; the job's own outcome is reported by Result, not here.
func (j *Job) SendChunk(ctx context.Context, args ...any) error {
	id, err := j.streamTarget()
	if err != nil {
		return err
	}
	s := j.s
	data, _, err := s.buildArgs(ctx, s.config(), j.dep, j.endpoint, args)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"data": data, "fn_index": j.dep.FnIndex, "session_hash": s.hash, "event_data": nil})
	if err != nil {
		return &ArgumentError{Endpoint: j.endpoint, Msg: err.Error()}
	}
	return s.app.postJSON(ctx, "stream/"+id, body)
}

// CloseStream ends a streaming-input job's input: the app finishes the
// event and the job completes with its last output.
func (j *Job) CloseStream(ctx context.Context) error {
	id, err := j.streamTarget()
	if err != nil {
		return err
	}
	return j.s.app.postJSON(ctx, "stream/"+id+"/close", []byte("{}"))
}
