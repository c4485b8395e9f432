package gradiotest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// endpointByName finds an endpoint's fn_index by api_name.
func (s *Server) endpointByName(name string) (int, *Endpoint) {
	name = strings.Trim(name, "/")
	for i, ep := range s.app.Endpoints {
		if ep.APIName == name {
			return i, ep
		}
	}
	return -1, nil
}

// handleCall serves POST call/{api}, POST call/v2/{api} and GET
// call/{api}/{event_id} (and the v2 GET alias).
func (s *Server) handleCall(w http.ResponseWriter, r *http.Request, rest string) {
	rest = strings.TrimSuffix(rest, "/")
	v2 := false
	if strings.HasPrefix(rest, "v2/") && s.Mode == Gradio6 {
		v2, rest = true, strings.TrimPrefix(rest, "v2/")
	}
	parts := strings.Split(rest, "/")
	switch {
	case r.Method == http.MethodPost && len(parts) == 1:
		s.callPost(w, r, parts[0], v2)
	case r.Method == http.MethodGet && len(parts) == 2:
		s.callGet(w, r, parts[1])
	default:
		notFound(w)
	}
}

func (s *Server) callPost(w http.ResponseWriter, r *http.Request, name string, v2 bool) {
	fn, ep := s.endpointByName(name)
	if ep == nil {
		// route_utils.get_fn raises FnIndexInferError (and /call/v2 a
		// KeyError on api_info): uncaught, a 500.
		s.uncaught(fmt.Sprintf(fnInferTrace, name)).write(w)
		return
	}
	var data []json.RawMessage
	var hash string
	if v2 {
		raw, _ := readAllLimit(r, 64<<20)
		var kw map[string]json.RawMessage
		if err := json.Unmarshal(raw, &kw); err != nil || kw == nil {
			detail(w, 422, []obj{{{"type", "json_invalid"}, {"loc", []any{"body", 0}}, {"msg", "JSON decode error"}, {"input", obj{}}}})
			return
		}
		for _, c := range ep.Inputs {
			if c.Type == "state" {
				data = append(data, json.RawMessage("null"))
				continue
			}
			name := c.ParameterName
			if name == "" {
				name = c.Label
			}
			v, ok := kw[name]
			switch {
			case ok:
				data = append(data, v)
			case c.HasDefault:
				data = append(data, mustMarshal(c.Default))
			default:
				detail(w, 400, "No value provided for required argument: "+name)
				return
			}
		}
	} else {
		b, _, err := decodeBody(r, true)
		if err != nil {
			err.(*errJoin).write(w)
			return
		}
		data = b.Data
		if b.SessionHash != nil {
			hash = *b.SessionHash
		}
		// data may leave out State inputs (prepare_simple_api_data).
		nonState := 0
		for _, c := range ep.Inputs {
			if c.Type != "state" {
				nonState++
			}
		}
		if len(data) == nonState && nonState != len(ep.Inputs) {
			full := make([]json.RawMessage, 0, len(ep.Inputs))
			k := 0
			for _, c := range ep.Inputs {
				if c.Type == "state" {
					full = append(full, json.RawMessage("null"))
				} else {
					full = append(full, data[k])
					k++
				}
			}
			data = full
		}
	}
	ev, err := s.enqueue(r, hash, fn, data, joinOpts{simple: true})
	if err != nil {
		err.(*errJoin).write(w)
		return
	}
	s.mu.Lock()
	s.callSess[ev.id] = ev.sess.hash
	s.mu.Unlock()
	writeJSON(w, 200, obj{{"event_id", ev.id}})
}

func (s *Server) callGet(w http.ResponseWriter, r *http.Request, eventID string) {
	s.mu.Lock()
	hash, ok := s.callSess[eventID]
	sess := s.sessions[hash]
	if !ok || sess == nil || !sess.hasQueue {
		s.mu.Unlock()
		sw := startSSE(w)
		_ = sw.Event("error", mustMarshal("404: Not Found"))
		return
	}
	s.mu.Unlock()
	sw := startSSE(w)
	s.streamSession(w, r, sw, sess, eventID)
}

// handleRun serves POST run/{api} (and api/{api}): the call runs outside the
// queue and the answer is the output dict (200) or the error payload (500).
func (s *Server) handleRun(w http.ResponseWriter, r *http.Request, name string) {
	b, _, err := decodeBody(r, true)
	if err != nil {
		err.(*errJoin).write(w)
		return
	}
	fn := -1
	if b.FnIndex != nil {
		fn = *b.FnIndex
	} else if i, _ := s.endpointByName(name); i >= 0 {
		fn = i
	} else if n, err := strconv.Atoi(name); err == nil {
		fn = n
	}
	if fn < 0 || fn >= len(s.app.Endpoints) {
		detail(w, http.StatusNotFound, "Function not found.")
		return
	}
	hash := ""
	if b.SessionHash != nil {
		hash = *b.SessionHash
	}
	ev, err := s.enqueue(r, hash, fn, b.Data, joinOpts{private: true, simple: true})
	if err != nil {
		err.(*errJoin).write(w)
		return
	}
	for {
		m, err := s.nextMsg(r.Context(), ev.q, nil)
		if err != nil {
			s.mu.Lock()
			ev.kill()
			s.mu.Unlock()
			if m != nil {
				internalError(w, 500)
			}
			return
		}
		if m == nil || m.kind != msgCompleted {
			continue
		}
		for _, f := range m.body {
			if f.k == "output" {
				status := 200
				if !m.success {
					status = 500
				}
				writeJSON(w, status, f.v)
				return
			}
		}
	}
}

// handleJoinV0 is the sse (v0) GET queue/join?fn_index&session_hash stream.
func (s *Server) handleJoinV0(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fn, err := strconv.Atoi(q.Get("fn_index"))
	hash := q.Get("session_hash")
	if err != nil || hash == "" {
		detail(w, 422, []obj{{{"type", "missing"}, {"loc", []any{"query", "fn_index"}}, {"msg", "Field required"}, {"input", nil}}})
		return
	}
	var data []json.RawMessage
	if d := q.Get("data"); d != "" {
		_ = json.Unmarshal([]byte(d), &data)
	}
	ev, err := s.enqueue(r, hash, fn, data, joinOpts{v0: true})
	if err != nil {
		je := err.(*errJoin)
		if je.status == 503 {
			sw := startSSE(w)
			_ = sw.Data(s.encode(&message{kind: msgQueueFull}))
			return
		}
		je.write(w)
		return
	}
	if data != nil {
		ev.v0data <- data
	}
	sw := startSSE(w)
	s.streamSession(w, r, sw, ev.q, "")
}

// handleDataV0 receives the data of a v0 event after send_data.
func (s *Server) handleDataV0(w http.ResponseWriter, r *http.Request) {
	b, _, err := decodeBody(r, true)
	if err != nil {
		err.(*errJoin).write(w)
		return
	}
	if b.EventID == nil {
		detail(w, 422, []obj{{{"type", "missing"}, {"loc", []any{"body", "event_id"}}, {"msg", "Field required"}, {"input", nil}}})
		return
	}
	s.mu.Lock()
	ev := s.events[*b.EventID]
	s.mu.Unlock()
	if ev == nil || ev.v0data == nil {
		detail(w, 404, "Event not found.")
		return
	}
	select {
	case ev.v0data <- b.Data:
	default:
	}
	writeJSON(w, 200, nil)
}
