package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gradiopool/gradiopool/pool"
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
// its address (clientAddr).
func (g *Gateway) clientID(r *http.Request) string {
	if len(g.apiKeys()) > 0 {
		if tok, ok := bearer(r); ok {
			sum := sha256.Sum256([]byte(tok))
			return "key:" + hex.EncodeToString(sum[:8])
		}
	}
	return "addr:" + g.clientAddr(r)
}

// parseTrustedProxies parses trusted_proxies: CIDRs, or addresses (one
// host each).
func parseTrustedProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR nor an address", s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// trustedPeer reports whether addr (an address without port) is one of
// the trusted proxies.
func (g *Gateway) trustedPeer(addr string) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range g.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientAddr is the address of r's client: its peer's, unless the peer
// is a trusted proxy; then the nearest hop of X-Forwarded-For (else of
// Forwarded's for=), from the right, that is not a trusted proxy itself
// (all trusted: the leftmost). Each proxy appends the address it saw, so
// what a client wrote into the header itself lies left of that hop and
// is never taken. A hop that is not an address (a proxy's obfuscated
// name, "unknown") ends the walk at the last trusted hop.
func (g *Gateway) clientAddr(r *http.Request) string {
	peer := remoteHost(r.RemoteAddr)
	if len(g.trusted) == 0 || !g.trustedPeer(peer) {
		return peer
	}
	hops := forwardedHops(r.Header)
	addr := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(hops[i])
		if err != nil {
			return addr
		}
		addr = a.Unmap().String()
		if !g.trustedPeer(addr) {
			return addr
		}
	}
	return addr
}

// forwardedHops lists the addresses X-Forwarded-For names, leftmost
// first; without that header, Forwarded's for= values (quotes, brackets
// and ports removed). Proxies set the former far more often: when both
// are present the latter may be the client's own.
func forwardedHops(h http.Header) []string {
	var hops []string
	if xff := h.Values("X-Forwarded-For"); len(xff) > 0 {
		for _, v := range xff {
			for _, hop := range strings.Split(v, ",") {
				hops = append(hops, strings.TrimSpace(hop))
			}
		}
		return hops
	}
	for _, v := range h.Values("Forwarded") {
		for _, elem := range strings.Split(v, ",") {
			for _, pair := range strings.Split(elem, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if !ok || !strings.EqualFold(k, "for") {
					continue
				}
				val = strings.Trim(val, `"`)
				if strings.HasPrefix(val, "[") { // [v6]:port
					if end := strings.IndexByte(val, ']'); end > 0 {
						val = val[1:end]
					}
				} else if host, _, err := net.SplitHostPort(val); err == nil {
					val = host
				}
				hops = append(hops, val)
			}
		}
	}
	return hops
}

// userCallKey is what max_calls_per_user counts r's call under: its
// client and its user's keyed hash; "" for an anonymous call.
func (g *Gateway) userCallKey(r *http.Request) string {
	user, err := pool.ParseUser(r.Header.Get(UserHeader))
	if err != nil || user == "" {
		return ""
	}
	return g.clientID(r) + "|" + g.backend.UserTag(user)
}

// eventParty is the party that r's call's event streams are charged to
// in its replica's part of the event budget (pool.CallOptions.Party): its
// user within its client when it names one, else its client (its API
// key, else its address). A party running parallel streams that holds
// more than its fair share of the whole budget (over every replica) when
// it is full loses its own, and the failure is its own, not the
// replica's.
func (g *Gateway) eventParty(r *http.Request) string {
	if k := g.userCallKey(r); k != "" {
		return k
	}
	return g.clientID(r)
}

// The codes of a call refused by a per-client or per-user limit.
const (
	codeTooManyCalls     = "too_many_calls"
	codeTooManyUserCalls = "too_many_user_calls"
)

// beginCalls counts r's call for its client and its user; release ends
// both. code says which limit refused it ("" when counted).
func (g *Gateway) beginCalls(r *http.Request) (release func(), code string) {
	relClient, ok := g.clientCalls.begin(g.clientID(r))
	if !ok {
		return nil, codeTooManyCalls
	}
	key := g.userCallKey(r)
	if key == "" {
		return relClient, ""
	}
	relUser, ok := g.userCalls.begin(key)
	if !ok {
		relClient()
		return nil, codeTooManyUserCalls
	}
	return func() { relUser(); relClient() }, ""
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

// beginClientCall counts r's call for its client and user, or answers
// 429 and reports false.
func (g *Gateway) beginClientCall(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	release, code := g.beginCalls(r)
	switch code {
	case "":
		return release, true
	case codeTooManyUserCalls:
		writeError(w, &apiError{Status: http.StatusTooManyRequests, Code: code, RetryAfter: 1,
			Message: "this user has max_calls_per_user calls in flight already; retry when one ends"})
	default:
		writeError(w, &apiError{Status: http.StatusTooManyRequests, Code: code, RetryAfter: 1,
			Message: "this client has max_calls_per_client calls in flight already; retry when one ends"})
	}
	return nil, false
}
