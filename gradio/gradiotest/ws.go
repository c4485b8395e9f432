package gradiotest

// Gradio 3 (ws mode): the queue is one WebSocket per call at
// {root}/queue/join, as recorded from a real 3.50.2 server
// (gradio/testdata/transcripts/gradio-3.50.2_*):
//
//	server: {"msg": "send_hash"}
//	client: {"fn_index": 5, "session_hash": "..."}
//	server: {"msg": "estimation", "rank": 0, "queue_size": 1, ...}
//	server: {"msg": "send_data"}
//	client: {"data": [...], "event_data": null, "fn_index": 5, "session_hash": "..."}
//	server: {"msg": "process_starts"}
//	server: {"msg": "process_generating", "output": {...}, "success": true}  (generators)
//	server: {"msg": "process_completed", "output": {"data": [...], ...}, "success": true}
//
// after which the server closes the socket. A full queue is
// {"msg": "queue_full"} and a close. A call is cancelled by closing the
// socket. Files are Gradio 3's dicts ({"name": path, "data": null,
// "is_file": true, "orig_name", "size"}), turned into the simulator's
// FileData on the way in and back on the way out, so the app's handlers are
// the same in every mode. The event machinery is sse v0's (Gradio 4.0-4.8
// kept Gradio 3's messages and moved them to SSE): send_data, its own
// message queue per event.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"github.com/gradiopool/gradiopool/internal/jsonwalk"
)

// wsReadLimit bounds one client frame (the data of a call), as the
// simulator's other bodies are bounded.
const wsReadLimit = 16 << 20

// handleJoinWS is GET queue/join of Gradio 3: the WebSocket of one call.
func (s *Server) handleJoinWS(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return // Accept answered the request
	}
	defer c.CloseNow()
	c.SetReadLimit(wsReadLimit)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// An upgraded connection outlives the server's Shutdown: the server's
	// stop ends it (a client that never sends its first frame included).
	defer context.AfterFunc(s.baseCtx, cancel)()
	write := func(b []byte) error {
		wctx, done := context.WithTimeout(ctx, 10*time.Second)
		defer done()
		return c.Write(wctx, websocket.MessageText, b)
	}
	if write([]byte(`{"msg": "send_hash"}`)) != nil {
		return
	}
	var hello struct {
		FnIndex     *int    `json:"fn_index"`
		SessionHash *string `json:"session_hash"`
	}
	if err := s.readWS(ctx, c, &hello); err != nil || hello.FnIndex == nil || hello.SessionHash == nil {
		c.Close(websocket.StatusPolicyViolation, "fn_index and session_hash expected")
		return
	}
	ev, err := s.enqueue(r, *hello.SessionHash, *hello.FnIndex, nil, joinOpts{v0: true})
	if err != nil {
		var je *errJoin
		if errors.As(err, &je) && je.status == http.StatusServiceUnavailable {
			_ = write(s.encode(&message{kind: msgQueueFull}))
			c.Close(websocket.StatusNormalClosure, "")
			return
		}
		c.Close(websocket.StatusInternalError, "")
		return
	}
	sess := ev.q
	clean := false
	defer func() {
		if !clean {
			// The caller closed the socket: Gradio 3 drops its call.
			s.mu.Lock()
			s.dropSessionLocked(sess)
			s.mu.Unlock()
		}
	}()
	for {
		m, err := s.nextMsgOf(ctx, sess, nil, "")
		if errors.Is(err, errStopped) {
			_ = write(s.encode(m))
			clean = true
			c.Close(websocket.StatusGoingAway, "")
			return
		}
		if err != nil {
			clean = errors.Is(err, errEnded)
			return
		}
		if write(wsFilesOut(s.encode(m))) != nil {
			return
		}
		switch m.kind {
		case msgSendData:
			var body struct {
				Data []json.RawMessage `json:"data"`
			}
			if err := s.readWS(ctx, c, &body); err != nil {
				return
			}
			for i, v := range body.Data {
				body.Data[i] = wsFilesIn(v)
			}
			select {
			case ev.v0data <- body.Data:
			default:
			}
			// The client sends nothing more; reading notices its close.
			readClosed := c.CloseRead(ctx)
			go func() {
				<-readClosed.Done()
				cancel()
			}()
		case msgCompleted:
			clean = true
			c.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}

// readWS reads one JSON text frame into v.
func (s *Server) readWS(ctx context.Context, c *websocket.Conn, v any) error {
	typ, b, err := c.Read(ctx)
	if err != nil {
		return err
	}
	if typ != websocket.MessageText {
		return errors.New("gradiotest: binary frame")
	}
	return json.Unmarshal(b, v)
}

// wsFilesIn turns Gradio 3 file dicts in an input value into FileData.
func wsFilesIn(v json.RawMessage) json.RawMessage {
	return wsWalkFiles(v, []byte(`"is_file"`), func(m map[string]any) (any, bool) {
		name, ok := m["name"].(string)
		if isFile, _ := m["is_file"].(bool); !ok || !isFile {
			return nil, false
		}
		return obj{{"path", name}, {"url", nil}, {"size", m["size"]}, {"orig_name", m["orig_name"]},
			{"mime_type", nil}, {"is_stream", false}, {"meta", obj{{"_type", "gradio.FileData"}}}}, true
	})
}

// wsFilesOut turns the FileData in an encoded message into Gradio 3's file
// dicts, as 3.50.2's postprocess writes them.
func wsFilesOut(b []byte) []byte {
	return wsWalkFiles(b, []byte(`"path"`), func(m map[string]any) (any, bool) {
		// The simulator's FileData (as Gradio 4.0-4.8 wrote it: meta
		// came with 4.9).
		p, ok := m["path"].(string)
		_, url := m["url"]
		_, orig := m["orig_name"]
		if !ok || !(url || orig) {
			return nil, false
		}
		return obj{{"orig_name", m["orig_name"]}, {"name", p}, {"size", m["size"]}, {"data", nil}, {"is_file", true}}, true
	})
}

// wsWalkFiles replaces the objects of b that conv takes; b is returned
// unchanged when it does not contain marker or takes none.
func wsWalkFiles(b []byte, marker []byte, conv func(map[string]any) (any, bool)) []byte {
	if !bytes.Contains(b, marker) {
		return b
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var x any
	if dec.Decode(&x) != nil {
		return b
	}
	x, changed := jsonwalk.Replace(x, conv)
	if !changed {
		return b
	}
	return mustMarshal(x)
}
