package gateway

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

type authKind int

const (
	authNone authKind = iota
	authAPI
	authAdmin
)

func (g *Gateway) serveAuthed(w http.ResponseWriter, r *http.Request, auth authKind, h http.HandlerFunc) {
	switch auth {
	case authAPI:
		if len(g.apiKeys()) > 0 {
			tok, ok := bearer(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="gradiopool"`)
				writeError(w, &apiError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "an API key is required: Authorization: Bearer <key>"})
				return
			}
			if !matchAny(tok, g.apiKeys()) {
				writeError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: "the API key is not valid"})
				return
			}
		}
	case authAdmin:
		if !g.checkAdmin(w, r) { // bearer token or the dashboard's login cookie (admin_auth.go)
			return
		}
	}
	h(w, r)
}

func bearer(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	const p = "bearer "
	if len(v) <= len(p) || !strings.EqualFold(v[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(v[len(p):]), true
}

// matchAny compares tok with every key in constant time (per key), so the
// time taken does not tell which prefix matched.
func matchAny(tok string, keys []string) bool {
	ok := 0
	for _, k := range keys {
		ok |= subtle.ConstantTimeCompare([]byte(tok), []byte(k))
	}
	return ok == 1
}
