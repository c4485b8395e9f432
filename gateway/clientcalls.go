package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
)

// clientCalls bounds the calls one client has in flight (waiting for a
// session or running), so that one client cannot take every session and
// every place in the queue from the others: past max_calls_per_client a
// new call is answered 429. A client is its API key when keys are
// configured, else its address.
type clientCalls struct {
	max atomic.Int64 // <= 0: no limit; a reload may change it
	// exemptLoopback lifts the limit for loopback addresses (see
	// perClientLimit: the derived default without API keys).
	exemptLoopback atomic.Bool

	mu sync.Mutex // guards n
	n  map[string]int
}

func newClientCalls(max int, exemptLoopback bool) *clientCalls {
	c := &clientCalls{n: map[string]int{}}
	c.setMax(max, exemptLoopback)
	return c
}

// setMax changes the limit; calls already counted stay counted.
func (c *clientCalls) setMax(max int, exemptLoopback bool) {
	c.max.Store(int64(max))
	c.exemptLoopback.Store(exemptLoopback)
}

// loopbackClient reports whether client (a clientID) is a loopback
// address.
func loopbackClient(client string) bool {
	host, ok := strings.CutPrefix(client, "addr:")
	if !ok {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// clientID names r's client: a hash of its API key (never the key), else
// its address.
func (g *Gateway) clientID(r *http.Request) string {
	if len(g.apiKeys()) > 0 {
		if tok, ok := bearer(r); ok {
			sum := sha256.Sum256([]byte(tok))
			return "key:" + hex.EncodeToString(sum[:8])
		}
	}
	return "addr:" + remoteHost(r.RemoteAddr)
}

// begin counts a call of client; release (safe to call more than once)
// ends it. ok is false past the limit (nothing counted).
func (c *clientCalls) begin(client string) (release func(), ok bool) {
	limit := int(c.max.Load())
	if limit <= 0 || (c.exemptLoopback.Load() && loopbackClient(client)) {
		return func() {}, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[client] >= limit {
		return nil, false
	}
	c.n[client]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			if c.n[client]--; c.n[client] <= 0 {
				delete(c.n, client)
			}
			c.mu.Unlock()
		})
	}, true
}

// beginClientCall counts r's call, or answers 429 and reports false.
func (g *Gateway) beginClientCall(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	release, ok = g.clientCalls.begin(g.clientID(r))
	if !ok {
		writeError(w, &apiError{Status: http.StatusTooManyRequests, Code: "too_many_calls", RetryAfter: 1,
			Message: "this client has max_calls_per_client calls in flight already; retry when one ends"})
	}
	return release, ok
}
