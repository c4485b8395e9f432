package gateway

import (
	"net/http"
)

func (g *Gateway) handleStats(w http.ResponseWriter, r *http.Request) {
	if g.serveScope(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, g.statsDocument(r.Context()))
}

func (g *Gateway) handleReady(w http.ResponseWriter, r *http.Request) {
	if g.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "draining"})
		return
	}
	if !g.backend.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "no replica is usable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true})
}
