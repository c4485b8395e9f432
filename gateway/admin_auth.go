package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// adminCookie is the cookie the dashboard's login form sets. Its value is
// an expiry time and an HMAC of it keyed by the admin token: the token
// itself never leaves the login request, and changing the token ends every
// login.
const adminCookie = "gradiopool_admin"

// adminCookieTTL is how long a login lasts.
const adminCookieTTL = 12 * time.Hour

// adminAuth says how a request stands with the admin token: open (no token
// configured), ok (a valid bearer token or login cookie), or refused; when
// refused, presented says whether a credential was given (403) or not (401).
func (g *Gateway) adminAuth(r *http.Request) (ok, presented bool) {
	token := g.adminToken()
	if token == "" {
		return true, false
	}
	if tok, has := bearer(r); has {
		return matchAny(tok, []string{token}), true
	}
	if c, err := r.Cookie(adminCookie); err == nil && c.Value != "" {
		return g.validAdminCookie(c.Value), true
	}
	return false, false
}

// checkAdmin is the admin routes' guard: it writes the 401/403 answer and
// returns false when the request may not pass.
func (g *Gateway) checkAdmin(w http.ResponseWriter, r *http.Request) bool {
	ok, presented := g.adminAuth(r)
	switch {
	case ok:
		return true
	case !presented:
		w.Header().Set("WWW-Authenticate", `Bearer realm="gradiopool-admin"`)
		writeError(w, &apiError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "the admin token is required: Authorization: Bearer <token>"})
	default:
		writeError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: "the admin token is not valid"})
	}
	return false
}

// adminCookieMAC is the cookie's signature of its expiry and login id.
func (g *Gateway) adminCookieMAC(expiry, id string) []byte {
	m := hmac.New(sha256.New, []byte(g.adminToken()))
	m.Write([]byte("gradiopool admin login\x00" + expiry + "\x00" + id))
	return m.Sum(nil)
}

func (g *Gateway) newAdminCookie(r *http.Request) *http.Cookie {
	exp := g.now().Add(adminCookieTTL)
	e, id := strconv.FormatInt(exp.Unix(), 10), newID()[:16]
	return &http.Cookie{
		Name: adminCookie, Value: e + "." + id + "." + hex.EncodeToString(g.adminCookieMAC(e, id)),
		Path: "/", Expires: exp, MaxAge: int(adminCookieTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isTLS(r),
	}
}

// parseAdminCookie returns the login id and expiry of a genuine, unexpired
// login cookie (revoked or not).
func (g *Gateway) parseAdminCookie(v string) (id string, exp time.Time, ok bool) {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return "", time.Time{}, false
	}
	got, err := hex.DecodeString(parts[2])
	if err != nil || subtle.ConstantTimeCompare(got, g.adminCookieMAC(parts[0], parts[1])) != 1 {
		return "", time.Time{}, false
	}
	sec, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || !g.now().Before(time.Unix(sec, 0)) {
		return "", time.Time{}, false
	}
	return parts[1], time.Unix(sec, 0), true
}

func (g *Gateway) validAdminCookie(v string) bool {
	id, _, ok := g.parseAdminCookie(v)
	return ok && !g.logins.revoked(id, g.now())
}

// revokedLogins are the login cookies logged out before their expiry: a
// copy of a cookie kept by anyone stops working at logout. Only a genuine
// cookie can be revoked, so the set grows with admins' logouts, not with
// requests; entries leave it when their cookie would have expired anyway.
type revokedLogins struct {
	mu  sync.Mutex // guards ids
	ids map[string]time.Time
}

func (l *revokedLogins) revoke(id string, exp, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ids == nil {
		l.ids = map[string]time.Time{}
	}
	for k, e := range l.ids {
		if !now.Before(e) {
			delete(l.ids, k)
		}
	}
	l.ids[id] = exp
}

func (l *revokedLogins) revoked(id string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.ids[id]
	return ok && now.Before(e)
}

// isTLS reports whether the client reached us over TLS (directly, or via a
// proxy saying so): the login cookie is then Secure.
func isTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
