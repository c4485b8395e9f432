package gradio

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// Gradio 3.x ("ws" protocol): queued calls run over one WebSocket per
// call (GET /queue/join upgraded), non-queued ones over POST /run/predict.
// This file holds a minimal RFC 6455 client: text frames, fragmentation,
// ping/pong and close; no extensions (no permessage-deflate).

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// maxWSMessage bounds one received message.
const maxWSMessage = 64 << 20

type wsConn struct {
	rwc io.ReadWriteCloser
	br  *bufio.Reader
	wmu sync.Mutex // serialises frame writes
	// meter is the connection's account in its party's part of the event
	// budget: a message's bytes beyond the allowance are charged as they
	// arrive (with the event streams' fair shares, reclaims and rate
	// floor), then pass to the message's Hold (readText).
	meter *sse.Meter
}

// wsChunk is how much of a frame's payload is read (and charged) at a
// time: a frame's announced length is not allocated before it arrives.
const wsChunk = 64 << 10

// dialWS upgrades GET u to a WebSocket whose messages are charged to
// budget. ctx stays attached to the connection: cancelling it tears the
// connection down.
func (a *app) dialWS(ctx context.Context, u string, budget *sse.Budget) (*wsConn, error) {
	var kb [16]byte
	_, _ = rand.Read(kb[:])
	key := base64.StdEncoding.EncodeToString(kb[:])
	req, err := a.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", key)
	resp, err := a.do(req, false)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := a.readBody(resp)
		if resp.StatusCode == http.StatusServiceUnavailable {
			return nil, joinUnavailable("queue/join (ws)", b)
		}
		return nil, &ProtocolError{Op: "queue/join (ws)", StatusCode: resp.StatusCode, Body: excerpt(b)}
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	if resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		resp.Body.Close()
		return nil, &ProtocolError{Op: "queue/join (ws)", Err: errors.New("bad Sec-WebSocket-Accept")}
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, &ProtocolError{Op: "queue/join (ws)", Err: errors.New("upgraded body is not writable")}
	}
	return newWSConn(rwc, budget), nil
}

func newWSConn(rwc io.ReadWriteCloser, budget *sse.Budget) *wsConn {
	meter, r := sse.NewMeter(rwc, budget)
	return &wsConn{rwc: rwc, br: bufio.NewReader(r), meter: meter}
}

// readText returns the next text (or binary) message, and its Hold of the
// event budget (nil for a small one: see wsConn.meter) for its consumer
// to release once it has decoded and delivered it; io.EOF after a close
// frame.
func (c *wsConn) readText() ([]byte, *sse.Hold, error) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return nil, nil, c.readErr(err)
		}
		fin, op := h[0]&0x80 != 0, h[0]&0x0f
		masked := h[1]&0x80 != 0
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(c.br, b[:]); err != nil {
				return nil, nil, c.readErr(err)
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(c.br, b[:]); err != nil {
				return nil, nil, c.readErr(err)
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		if n > maxWSMessage || uint64(len(msg))+n > maxWSMessage {
			return nil, nil, fmt.Errorf("websocket message: %w", ErrEventTooLarge)
		}
		var mask [4]byte
		if masked {
			if _, err := io.ReadFull(c.br, mask[:]); err != nil {
				return nil, nil, c.readErr(err)
			}
		}
		if op >= 0x8 { // a control frame: at most 125 bytes, not fragmented (RFC 6455 5.5)
			if n > 125 || !fin {
				return nil, nil, fmt.Errorf("websocket control frame of %d bytes (final %v)", n, fin)
			}
			payload := make([]byte, n)
			if _, err := io.ReadFull(c.br, payload); err != nil {
				return nil, nil, c.readErr(err)
			}
			unmask(payload, mask, masked)
			switch op {
			case 0x8: // close
				_ = c.writeFrame(0x8, nil)
				return nil, nil, io.EOF
			case 0x9: // ping
				if err := c.writeFrame(0xA, payload); err != nil {
					return nil, nil, err
				}
			case 0xA: // pong
			default:
				return nil, nil, fmt.Errorf("websocket opcode %d", op)
			}
			continue
		}
		if op > 0x2 {
			return nil, nil, fmt.Errorf("websocket opcode %d", op)
		}
		start, end := len(msg), len(msg)+int(n)
		for len(msg) < end {
			k := min(end-len(msg), wsChunk)
			if len(msg)+k > cap(msg) {
				grow := min(max(cap(msg), k), end-len(msg)) // doubling, within the frame
				if err := c.meter.Set(int64(cap(msg)+grow) - sse.DefaultAllowance); err != nil {
					return nil, nil, fmt.Errorf("websocket message: %w", err)
				}
				msg = slices.Grow(msg, grow)
			}
			msg = msg[:len(msg)+k]
			if _, err := io.ReadFull(c.br, msg[len(msg)-k:]); err != nil {
				return nil, nil, c.readErr(err)
			}
		}
		unmask(msg[start:], mask, masked)
		if fin {
			hold, err := c.meter.Hold()
			if err != nil {
				return nil, nil, fmt.Errorf("websocket message: %w", err)
			}
			return msg, hold, nil
		}
	}
}

// readErr is why a read failed: the budget's cut (which closed the
// connection) when there was one.
func (c *wsConn) readErr(err error) error {
	if cause := c.meter.Err(); cause != nil {
		return fmt.Errorf("websocket message: %w", cause)
	}
	return err
}

func unmask(b []byte, mask [4]byte, masked bool) {
	if !masked {
		return
	}
	for i := range b {
		b[i] ^= mask[i%4]
	}
}

// writeFrame writes one masked frame (clients must mask).
func (c *wsConn) writeFrame(op byte, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var buf bytes.Buffer
	buf.WriteByte(0x80 | op)
	switch n := len(payload); {
	case n < 126:
		buf.WriteByte(0x80 | byte(n))
	case n <= 0xffff:
		buf.WriteByte(0x80 | 126)
		_ = binary.Write(&buf, binary.BigEndian, uint16(n))
	default:
		buf.WriteByte(0x80 | 127)
		_ = binary.Write(&buf, binary.BigEndian, uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	buf.Write(mask[:])
	for i, b := range payload {
		buf.WriteByte(b ^ mask[i%4])
	}
	_, err := c.rwc.Write(buf.Bytes())
	return err
}

func (c *wsConn) writeJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.writeFrame(0x1, b)
}

func (c *wsConn) Close() error {
	c.meter.Release()
	_ = c.writeFrame(0x8, []byte{0x03, 0xe8}) // 1000 normal closure
	return c.rwc.Close()
}

// skipQueue says whether a Gradio 3 dependency runs without the queue.
func skipQueue(cfg *Config, d *Dependency) bool {
	if d.Queue != nil {
		return !*d.Queue
	}
	return !cfg.EnableQueue
}

// submitWS runs a call on a Gradio 3 app.
func (s *appSession) submitWS(ctx context.Context, dep *Dependency, endpoint string, data []any, jo jobOpts) (*Job, error) {
	for i, v := range data {
		if hasFileData(v) {
			n, err := legacyFiles(endpoint, v)
			if err != nil {
				return nil, err
			}
			data[i] = n
		}
	}
	a := s.app
	jctx, jcancel := context.WithCancel(s.ctx)
	j := newJob(s, ctx, dep, endpoint, jo)
	j.onFinish = func(error) { jcancel() }
	if skipQueue(a.cfg, dep) {
		return s.startLocalJob(ctx, j, jcancel, func() { s.runPredict(jctx, j, data) })
	}
	// The handshake is bounded like other header waits.
	var timer *time.Timer
	if d := a.set.headerTimeout; d > 0 {
		timer = time.AfterFunc(d, jcancel)
	}
	conn, err := a.dialWS(jctx, a.base+"/queue/join", s.eventParty())
	if timer != nil && !timer.Stop() && err == nil {
		err = errors.New("websocket handshake timed out")
	}
	if err != nil {
		jcancel()
		if errors.Is(err, ErrQueueFull) {
			return nil, err
		}
		var pe *ProtocolError
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, &ConnectionLostError{Err: fmt.Errorf("queue/join (ws): %w", err)}
	}
	// Ending the job (done, cancelled, Close) must unblock the reader:
	// an upgraded connection does not follow its request's context.
	j.onFinish = func(error) {
		jcancel()
		conn.Close()
	}
	fail := func(err error) (*Job, error) {
		conn.Close()
		jcancel()
		return nil, err
	}
	// send_hash, then the first queue message says whether we are in.
	var first *message
	for first == nil {
		b, hold, err := conn.readText()
		if err != nil {
			return fail(&ConnectionLostError{Err: fmt.Errorf("queue/join (ws): %w", err)})
		}
		m, err := decodeMessage(b)
		if err != nil {
			hold.Release()
			return fail(&ProtocolError{Op: "queue/join (ws)", Body: excerpt(b), Err: err})
		}
		m.hold, m.src = hold, conn.meter // the first message may be a large completion
		switch m.Msg {
		case "send_hash":
			m.releaseHold()
			if err := conn.writeJSON(map[string]any{"fn_index": dep.FnIndex, "session_hash": s.hash}); err != nil {
				return fail(&ConnectionLostError{Err: err})
			}
		case "queue_full":
			m.releaseHold()
			return fail(fmt.Errorf("%w: this application is currently busy", ErrQueueFull))
		default:
			first = m
		}
	}
	return s.startLocalJob(ctx, j, jcancel, func() {
		defer conn.Close()
		handle := func(m *message) bool {
			defer m.releaseHold() // unless the job's result took it
			switch m.Msg {
			case "send_data":
				if err := conn.writeJSON(joinBody{Data: data, FnIndex: dep.FnIndex, SessionHash: s.hash}); err != nil {
					s.fail(j, &ConnectionLostError{Accepted: true, Err: err})
					return false
				}
				return true
			case "queue_full":
				s.fail(j, fmt.Errorf("%w: this application is currently busy", ErrQueueFull))
				return false
			}
			s.mu.Lock()
			j.handle(m)
			s.mu.Unlock()
			return true
		}
		if !handle(first) {
			return
		}
		for {
			select {
			case <-j.done:
				return
			default:
			}
			b, hold, err := conn.readText()
			if err != nil {
				if jctx.Err() == nil {
					s.fail(j, &ConnectionLostError{Accepted: true, Err: fmt.Errorf("queue/join (ws): %w", err)})
				}
				return
			}
			m, err := decodeMessage(b)
			if err != nil {
				hold.Release()
				s.fail(j, &ProtocolError{Op: "queue/join (ws)", Body: excerpt(b), Err: err})
				return
			}
			m.hold, m.src = hold, conn.meter
			if !handle(m) {
				return
			}
		}
	})
}

// startLocalJob publishes a job that has its own connection (v0, ws, run)
// and runs f for it.
func (s *appSession) startLocalJob(ctx context.Context, j *Job, jcancel context.CancelFunc, f func()) (*Job, error) {
	s.mu.Lock()
	s.v0seq++
	j.v0key = "local:" + fmt.Sprint(s.v0seq)
	s.pending[j.v0key] = j
	ok := s.goLocked(func() {
		defer jcancel()
		f()
	})
	if !ok {
		delete(s.pending, j.v0key)
	}
	s.mu.Unlock()
	if !ok {
		jcancel()
		return nil, ErrClosed
	}
	j.watch(ctx)
	return j, nil
}

// runPredict calls POST {base}/run/predict (Gradio 3 without queue).
func (s *appSession) runPredict(ctx context.Context, j *Job, data []any) {
	a := s.app
	body, _ := json.Marshal(joinBody{Data: data, FnIndex: j.dep.FnIndex, SessionHash: s.hash})
	req, err := a.newRequest(ctx, http.MethodPost, a.api("run/predict"), bytes.NewReader(body))
	if err != nil {
		s.fail(j, err)
		return
	}
	req.Header["Content-Type"] = jsonCT
	resp, err := a.do(req, false)
	if err != nil {
		if ctx.Err() == nil {
			s.fail(j, &ConnectionLostError{Accepted: true, Err: fmt.Errorf("run/predict: %w", err)})
		}
		return
	}
	rb, err := a.readBody(resp)
	if err != nil {
		s.fail(j, &ConnectionLostError{Accepted: true, Err: fmt.Errorf("run/predict: %w", err)})
		return
	}
	out, perr := parseOutput(rb)
	switch {
	case perr != nil:
		s.fail(j, &ProtocolError{Op: "run/predict", StatusCode: resp.StatusCode, Body: excerpt(rb), Err: perr})
	case out.isError():
		s.fail(j, s.appErr(out, nil))
	case resp.StatusCode != http.StatusOK || out.Data == nil:
		s.fail(j, &ProtocolError{Op: "run/predict", StatusCode: resp.StatusCode, Body: excerpt(rb)})
	default:
		s.mu.Lock()
		s.completeLocked(j, s.dropState(j.dep, out.Data))
		s.mu.Unlock()
	}
}

func hasFileData(v any) bool {
	switch x := v.(type) {
	case FileData, *FileData:
		return true
	case []any:
		for _, e := range x {
			if hasFileData(e) {
				return true
			}
		}
	case map[string]any:
		for _, e := range x {
			if hasFileData(e) {
				return true
			}
		}
	}
	return false
}
