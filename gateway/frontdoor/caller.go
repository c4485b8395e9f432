package frontdoor

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"

	"github.com/gradiopool/gradiopool/pool"
)

// Who a request comes from: its user, client, session hash and the headers
// passed on to replicas.

// shortHash is the part of a session hash that may be logged.
func shortHash(h string) string {
	if len(h) > 4 {
		return h[:4] + "…"
	}
	return h
}

// owner is the keyed hash of the caller's credentials: a session answers
// only to the credentials that created it.
func (f *FrontDoor) owner(r *http.Request) string {
	v := r.Header.Get("Authorization")
	if v == "" {
		return ""
	}
	m := hmac.New(sha256.New, f.conf().HashKey)
	m.Write([]byte("owner\x00" + v))
	return hex.EncodeToString(m.Sum(nil)[:12])
}

// clientID names r's client for the session limits (Config.ClientID).
func (f *FrontDoor) clientID(r *http.Request) string {
	if f.conf().ClientID != nil {
		return f.conf().ClientID(r)
	}
	if o := f.owner(r); o != "" {
		return "owner:" + o
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}

// errBadUser is a malformed X-Gradiopool-User.
var errBadUser = errors.New("the " + UserHeader + " header must be one e-mail address")

// user returns the caller's normalised user ("" anonymous).
func user(r *http.Request) (string, error) {
	u, err := pool.ParseUser(r.Header.Get(UserHeader))
	if err != nil {
		return "", errBadUser
	}
	return u, nil
}

// validHash accepts a caller's session hash: short and plain, since it is
// a map key and travels in URLs.
func validHash(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// newBackendHash makes the session hash the gateway uses at a replica: the
// caller's own hash never reaches a replica, so callers cannot collide with
// each other or with the pool's sessions there.
func newBackendHash() string { return "gp" + randomHex(10) }

// callerHeaders copies what the caller may send to the replica: its own
// token and X-IP-Token when ForwardCallerToken is set.
func (f *FrontDoor) callerHeaders(r *http.Request, out http.Header) {
	if !f.conf().ForwardCallerToken {
		return
	}
	tok := r.Header.Get("X-HF-Authorization")
	if tok == "" && !f.conf().CallerAuthIsKey {
		tok = r.Header.Get("Authorization")
	}
	if tok != "" {
		out.Set("Authorization", tok)
	}
	if ip := r.Header.Get("X-IP-Token"); ip != "" {
		out.Set("X-IP-Token", ip)
	}
}

// newEventID is an event id shaped like Gradio's: 32 hex digits.
func newEventID() string { return randomHex(16) }

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
