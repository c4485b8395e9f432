package gradio

import (
	"io"
	"net/http"
	"net/url"
	"time"
)

// startHeartbeatLocked starts the /heartbeat/{session} stream once, when
// the app asks for it (config.connect_heartbeat, as the JS client) or
// WithHeartbeat(true) forces it. It is opened lazily on the first call and
// reopened whenever it ends, until Close. Callers hold s.mu.
func (s *appSession) startHeartbeatLocked() {
	if s.hbOn {
		return
	}
	set, cfg := s.app.set, s.config()
	want := set.heartbeat == 1 || (set.heartbeat == 0 && cfg.ConnectHeartbeat)
	if !want || cfg.Protocol != protocolSSEv3 {
		return
	}
	s.hbOn = s.goLocked(s.heartbeatLoop)
}

func (s *appSession) heartbeatLoop() {
	a := s.app
	backoff := time.Second
	for s.ctx.Err() == nil {
		start := time.Now()
		s.readHeartbeat()
		if s.ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return
		}
		if backoff < 30*time.Second {
			backoff *= 2
		}
		a.log.Debug("gradio: reopening heartbeat", "session", s.hash)
	}
}

func (s *appSession) readHeartbeat() {
	a := s.app
	req, err := a.newRequest(s.ctx, http.MethodGet, a.api("heartbeat/"+url.PathEscape(s.hash)), nil)
	if err != nil {
		return
	}
	req.Header["Accept"] = sseAcc
	resp, err := a.do(req, true)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
}
