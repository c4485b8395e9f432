package gradiotest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/backoff"
)

// runEvent executes one event on its own goroutine.
func (s *Server) runEvent(ev *event) {
	defer s.wg.Done()
	defer s.finishEvent(ev)
	if ev.v0 {
		s.emit(ev, msgSendData, nil)
		t := time.NewTimer(s.scaled(v0SendDataTimeout)) // 5 s, scaled by TimeScale
		select {
		case d := <-ev.v0data:
			t.Stop()
			s.mu.Lock()
			ev.data = d
			s.mu.Unlock()
		case <-t.C:
			// Gradio 4.8 drops an event whose data does not arrive in time.
			s.mu.Lock()
			ev.kill()
			ev.q.ended = true
			ev.q.signal()
			s.mu.Unlock()
			return
		case <-ev.ctx.Done():
			t.Stop()
			return
		}
	}
	s.mu.Lock()
	eta := ev.group.avg()
	s.mu.Unlock()
	if s.Mode.atLeast(protoV1) {
		s.emit(ev, msgStarts, obj{{"eta", eta}})
	} else {
		s.emit(ev, msgStarts, nil)
	}
	// The function runs on a worker thread (MaxThreads), its Latency
	// included.
	release, ok := s.thread(ev.ctx)
	if !ok {
		return
	}
	defer release()
	if err := backoff.Sleep(ev.ctx, s.knobsNow().Latency); err != nil {
		return
	}
	inputs, err := s.prepareInputs(ev)
	if err != nil {
		s.fail(ev, err, true)
		return
	}
	s.execs.inc(ev.ep.APIName)
	call := &Call{Inputs: inputs, APIName: ev.ep.APIName, SessionHash: ev.sess.hash, EventID: ev.id, Header: ev.header, srv: s, ev: ev}
	ev.started = time.Now()
	if ev.ep.Generator != nil {
		s.runGenerator(ev, call)
		return
	}
	if ev.ep.Stream && s.Mode.major() >= 5 {
		s.runStreaming(ev, call)
		return
	}
	outs, err := safeHandler(ev.ctx, ev.ep.Handler, call)
	if ev.ctx.Err() != nil {
		return // cancelled or dropped: nothing more is sent
	}
	if err != nil {
		s.fail(ev, err, true)
		return
	}
	full, err := s.storeOutputs(ev, outs)
	if err != nil {
		s.fail(ev, err, true)
		return
	}
	dur := time.Since(ev.started).Seconds()
	s.complete(ev, full, dur, false)
}

func (s *Server) runGenerator(ev *event, call *Call) {
	var prev []json.RawMessage
	var lastOut obj
	step := time.Now()
	yield := func(outs ...any) error {
		if err := ev.ctx.Err(); err != nil {
			return err
		}
		full, err := s.storeOutputs(ev, outs)
		if err != nil {
			return err
		}
		data := make([]any, len(full))
		for i := range full {
			if prev != nil && i < len(prev) && !ev.simple && s.Mode.atLeast(protoV2) {
				data[i] = diffJSON(prev[i], full[i])
			} else {
				data[i] = full[i]
			}
		}
		dur := time.Since(step).Seconds()
		step = time.Now()
		out := s.outputObj(ev, data, true, dur)
		lastOut = s.outputObj(ev, rawAny(full), true, dur)
		body := obj{{"output", out}, {"success", true}}
		if s.Mode.major() >= 5 {
			body = body.set("time_limit", nil)
		}
		s.emitMsg(ev, &message{kind: msgGenerating, eventID: ev.id, body: body, full: full, success: true})
		prev = full
		return nil
	}
	err := safeGenerator(ev.ctx, ev.ep.Generator, call, yield)
	if ev.ctx.Err() != nil {
		return
	}
	if err != nil {
		s.fail(ev, err, prev == nil)
		return
	}
	if prev == nil {
		prev = make([]json.RawMessage, len(ev.ep.Outputs))
		for i := range prev {
			prev[i] = json.RawMessage("null")
		}
	}
	if !s.Mode.atLeast(protoV2) && lastOut != nil {
		// Gradio 4.8-4.16 repeat the last generating output as the result.
		s.completeWith(ev, lastOut, prev)
		return
	}
	s.complete(ev, prev, time.Since(step).Seconds(), true)
}

func rawAny(full []json.RawMessage) []any {
	out := make([]any, len(full))
	for i, v := range full {
		out[i] = v
	}
	return out
}

func safeHandler(ctx context.Context, h HandlerFunc, c *Call) (outs []any, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("handler panicked: %v", v)
		}
	}()
	if h == nil {
		return nil, errors.New("endpoint has no handler")
	}
	return h(ctx, c)
}

func safeGenerator(ctx context.Context, g GeneratorFunc, c *Call, yield func(...any) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("generator panicked: %v", v)
		}
	}()
	return g(ctx, c, yield)
}

// prepareInputs checks the arity and substitutes gr.State values.
func (s *Server) prepareInputs(ev *event) ([]json.RawMessage, error) {
	ep := ev.ep
	ids := s.compIDs[ev.fnIndex][0]
	if len(ev.data) < len(ep.Inputs) {
		wanted := make([]string, len(ep.Inputs))
		for i, c := range ep.Inputs {
			wanted[i] = "<gradio.components." + c.Type + ">"
		}
		return nil, pyErr("An event handler (%s) didn't receive enough input values (needed: %d, got: %d).\n"+
			"Check if the event handler calls a Javascript function, and make sure its return value is correct.\n"+
			"Wanted inputs:\n    [%s]\nReceived inputs:\n    %s",
			ep.APIName, len(ep.Inputs), len(ev.data), strings.Join(wanted, ", "), mustMarshal(ev.data))
	}
	in := make([]json.RawMessage, len(ep.Inputs))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireStateLocked(ev.sess)
	for i, c := range ep.Inputs {
		v := ev.data[i]
		if len(v) == 0 {
			v = json.RawMessage("null")
		}
		if c.Type == "state" {
			if st, ok := ev.sess.state[ids[i]]; ok {
				v = st
			} else {
				v = s.stateIDs[ids[i]]
			}
		}
		in[i] = v
	}
	return in, nil
}

// expireStateLocked drops a session's gr.State values when its heartbeat
// closed more than StateTTL ago (Gradio deletes them 1 h after the tab closes).
func (s *Server) expireStateLocked(sess *simSession) {
	ttl := s.knobs.StateTTL
	if ttl == 0 {
		ttl = DefaultStateTTL
	}
	if ttl < 0 || sess.closedAt.IsZero() || time.Since(sess.closedAt) < ttl {
		return
	}
	sess.state = map[int]json.RawMessage{}
	sess.closedAt = time.Time{}
}

// storeOutputs turns handler outputs into JSON, storing State outputs in the
// session and replacing them with null.
func (s *Server) storeOutputs(ev *event, outs []any) ([]json.RawMessage, error) {
	ep := ev.ep
	if len(outs) != len(ep.Outputs) {
		return nil, pyErr("A function (%s) didn't return the right number of output values (needed: %d, returned: %d).",
			ep.APIName, len(ep.Outputs), len(outs))
	}
	ids := s.compIDs[ev.fnIndex][1]
	full := make([]json.RawMessage, len(outs))
	var states map[int]json.RawMessage
	for i, v := range outs {
		b, err := marshal(v)
		if err != nil {
			return nil, fmt.Errorf("output %d: %w", i, err)
		}
		if ep.Outputs[i].Type == "state" {
			if states == nil {
				states = map[int]json.RawMessage{}
			}
			states[ids[i]] = b
			b = json.RawMessage("null")
		}
		full[i] = b
	}
	if states != nil {
		s.mu.Lock()
		for id, b := range states {
			ev.sess.state[id] = b
		}
		s.mu.Unlock()
	}
	return full, nil
}

// outputObj builds the output dict of process_generating/completed.
func (s *Server) outputObj(ev *event, data []any, generating bool, dur float64) obj {
	s.mu.Lock()
	g := ev.group
	avg := (g.total + dur) / float64(g.runs+1)
	s.mu.Unlock()
	o := obj{{"data", data}, {"is_generating", generating}, {"duration", dur}, {"average_duration", avg}}
	if s.Mode.major() >= 5 {
		var rc any
		if !generating {
			rc = s.renderConfig(ev.ep)
		}
		o = o.set("render_config", rc).set("changed_state_ids", []any{})
	}
	if s.Mode == Gradio6 {
		o = o.set("used_cache", nil)
	}
	return o
}

func (s *Server) complete(ev *event, full []json.RawMessage, dur float64, _ bool) {
	s.completeWith(ev, s.outputObj(ev, rawAny(full), false, dur), full)
}

func (s *Server) completeWith(ev *event, out obj, full []json.RawMessage) {
	body := obj{{"output", out}, {"success", true}}
	if s.Mode.major() >= 5 {
		body = body.set("title", nil)
	}
	if s.Mode == Gradio6 {
		var dur, avg any
		for _, f := range out {
			switch f.k {
			case "duration":
				dur = f.v
			case "average_duration":
				avg = f.v
			}
		}
		body = body.set("used_cache", nil).set("cache_duration", dur).set("avg_time", avg)
	}
	s.emitMsg(ev, &message{kind: msgCompleted, eventID: ev.id, body: body, full: full, success: true})
}

// errorPayload is utils.error_payload with show_error=True.
func (s *Server) errorPayload(err error) (obj, any) {
	var ge *Error
	if errors.As(err, &ge) {
		title := ge.Title
		if title == "" {
			title = "Error"
		}
		d := ge.Duration
		if d == 0 {
			d = 10
		}
		if s.Mode.major() < 5 {
			// Gradio 4 sends str(error), which is repr(message), and from
			// 4.44 (measured; not in the 4.8-4.20 captures) duration and
			// visible too.
			if s.Mode == Gradio4SSEv3 {
				return obj{{"error", gradio.PyRepr(ge.Message)}, {"duration", d}, {"visible", !ge.Hidden}}, nil
			}
			return obj{{"error", gradio.PyRepr(ge.Message)}}, nil
		}
		return obj{{"error", ge.Message}, {"duration", d}, {"visible", !ge.Hidden}, {"title", title}}, title
	}
	if s.Mode.major() >= 5 {
		return obj{{"error", err.Error()}, {"visible", true}}, "Error"
	}
	return obj{{"error", err.Error()}}, nil
}

// fail sends a failed process_completed. top says whether the top-level
// title is set (Gradio leaves it null for a generator failing mid-stream).
func (s *Server) fail(ev *event, err error, top bool) {
	payload, title := s.errorPayload(err)
	body := obj{{"output", payload}, {"success", false}}
	if s.Mode.major() >= 5 {
		if !top {
			title = nil
		}
		body = body.set("title", title)
	}
	if s.Mode == Gradio6 {
		body = body.set("used_cache", nil).set("cache_duration", nil).set("avg_time", nil)
	}
	s.emitMsg(ev, &message{kind: msgCompleted, eventID: ev.id, body: body, errData: payload})
}

// finishEvent frees the event's concurrency slot and records its duration.
func (s *Server) finishEvent(ev *event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := ev.group
	g.running--
	if !ev.started.IsZero() && ev.ctx.Err() == nil {
		g.runs++
		g.total += time.Since(ev.started).Seconds()
	}
	ev.status = statusDone
	ev.cancel()
	if s.events[ev.id] == ev {
		delete(s.events, ev.id)
	}
	s.dispatchLocked(g)
}
