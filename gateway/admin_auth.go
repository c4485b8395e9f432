package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// AdminCookie is the cookie the dashboard's login form sets. Its value is
// an expiry time and an HMAC of it keyed by the admin token: the token
// itself never leaves the login request, and changing the token ends every
// login.
const AdminCookie = "gradiopool_admin"

// adminCookieTTL is how long a login lasts.
const adminCookieTTL = 12 * time.Hour

// adminAuth says how a request stands with the admin token: open (no token
// configured), ok (a valid bearer token or login cookie), or refused; when
// refused, presented says whether a credential was given (403) or not (401).
func (g *Gateway) adminAuth(r *http.Request) (ok, presented bool) {
	token := g.cfg.Secrets.AdminToken
	if token == "" {
		return true, false
	}
	if tok, has := bearer(r); has {
		return matchAny(tok, []string{token}), true
	}
	if c, err := r.Cookie(AdminCookie); err == nil && c.Value != "" {
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

// adminCookieMAC is the cookie's signature of its expiry.
func (g *Gateway) adminCookieMAC(expiry string) []byte {
	m := hmac.New(sha256.New, []byte(g.cfg.Secrets.AdminToken))
	m.Write([]byte("gradiopool admin login\x00" + expiry))
	return m.Sum(nil)
}

func (g *Gateway) newAdminCookie(r *http.Request) *http.Cookie {
	exp := g.now().Add(adminCookieTTL)
	e := strconv.FormatInt(exp.Unix(), 10)
	return &http.Cookie{
		Name: AdminCookie, Value: e + "." + hex.EncodeToString(g.adminCookieMAC(e)),
		Path: "/", Expires: exp, MaxAge: int(adminCookieTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isTLS(r),
	}
}

func (g *Gateway) validAdminCookie(v string) bool {
	e, sig, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return false
	}
	if subtle.ConstantTimeCompare(got, g.adminCookieMAC(e)) != 1 {
		return false
	}
	exp, err := strconv.ParseInt(e, 10, 64)
	return err == nil && g.now().Before(time.Unix(exp, 0))
}

// isTLS reports whether the client reached us over TLS (directly, or via a
// proxy saying so): the login cookie is then Secure.
func isTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
