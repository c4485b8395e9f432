package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
)

const adminToken = "admin-secret-for-ui"

// noRedirect is a client that shows redirects instead of following them.
func noRedirect(jar http.CookieJar) *http.Client {
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func login(t *testing.T, c *http.Client, base, token string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/admin/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func get(t *testing.T, c *http.Client, u string, hdr ...string) answer {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func TestAdminLogin(t *testing.T) {
	g, srv, logs := newGateway(t, newFake(), func(c *gateway.Config) { c.Secrets.AdminToken = adminToken })
	jar, _ := cookiejar.New(nil)
	c := noRedirect(jar)

	// Without a credential: the login form, never the dashboard; a token
	// in the URL counts for nothing.
	for _, path := range []string{"/admin", "/admin?token=" + adminToken, "/admin/"} {
		a := get(t, c, srv.URL+path)
		if a.status != http.StatusUnauthorized || !strings.Contains(a.body, `action="/admin/login"`) || strings.Contains(a.body, "replica-card") {
			t.Fatalf("GET %s: %d, want 401 with the login form", path, a.status)
		}
	}
	if a := get(t, c, srv.URL+"/api/admin/history"); a.status != http.StatusUnauthorized {
		t.Fatalf("history without credential: %d", a.status)
	}

	// A wrong token is refused and sets no cookie.
	resp := login(t, c, srv.URL, "wrong-token")
	if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: %d, cookies %v; want 403 and none", resp.StatusCode, resp.Cookies())
	}
	// A cross-site form post is refused even with the right token.
	if resp := login(t, c, srv.URL, adminToken, "Origin", "https://evil.example"); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Fatalf("cross-site login: %d", resp.StatusCode)
	}

	// The right token: a cookie that is HttpOnly, SameSite=Strict, not the
	// token, and a redirect to the page.
	resp = login(t, c, srv.URL, adminToken, "Origin", srv.URL)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/admin" {
		t.Fatalf("login: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var ck *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == gateway.AdminCookie {
			ck = k
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || strings.Contains(ck.Value, adminToken) {
		t.Fatalf("cookie = %+v; want HttpOnly, SameSite=Strict, not Secure on plain HTTP, without the token", ck)
	}
	a := get(t, c, srv.URL+"/admin")
	if a.status != http.StatusOK || !strings.Contains(a.body, "replica-card") {
		t.Fatalf("dashboard with the cookie: %d", a.status)
	}
	if csp := a.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP = %q", csp)
	}
	// The cookie opens the admin API too.
	for _, p := range []string{"/api/admin/history", "/api/admin/pool-stats"} {
		if a := get(t, c, srv.URL+p); a.status != http.StatusOK {
			t.Errorf("GET %s with the cookie: %d", p, a.status)
		}
	}
	// A forged or altered cookie is refused.
	u, _ := url.Parse(srv.URL)
	forged, _ := cookiejar.New(nil)
	tail := "00"
	if strings.HasSuffix(ck.Value, tail) {
		tail = "11" // an altered cookie must differ (it ended in 00 once in 256 runs)
	}
	forged.SetCookies(u, []*http.Cookie{{Name: gateway.AdminCookie, Value: ck.Value[:len(ck.Value)-2] + tail, Path: "/"}})
	if a := get(t, noRedirect(forged), srv.URL+"/api/admin/history"); a.status != http.StatusForbidden {
		t.Errorf("altered cookie: %d, want 403", a.status)
	}
	// Behind a TLS proxy the cookie is Secure.
	resp = login(t, noRedirect(nil), srv.URL, adminToken, "X-Forwarded-Proto", "https")
	if cs := resp.Cookies(); len(cs) != 1 || !cs[0].Secure {
		t.Errorf("cookie behind TLS = %+v, want Secure", cs)
	}
	// The login expires.
	g.SetClock(func() time.Time { return time.Now().Add(13 * time.Hour) })
	if a := get(t, c, srv.URL+"/api/admin/history"); a.status != http.StatusForbidden {
		t.Errorf("expired login: %d, want 403", a.status)
	}
	g.SetClock(time.Now)
	// Logout clears it.
	req, _ := http.NewRequest("POST", srv.URL+"/admin/logout", nil)
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if a := get(t, c, srv.URL+"/admin"); a.status != http.StatusUnauthorized {
		t.Errorf("after logout: %d", a.status)
	}
	// A copy of the cookie taken before the logout (a shared machine, a
	// leaked header) no longer opens anything either.
	stolen, _ := cookiejar.New(nil)
	stolen.SetCookies(u, []*http.Cookie{{Name: gateway.AdminCookie, Value: ck.Value, Path: "/"}})
	if a := get(t, noRedirect(stolen), srv.URL+"/api/admin/history"); a.status != http.StatusForbidden {
		t.Errorf("a copy of the logged-out cookie: %d, want 403", a.status)
	}
	// The bearer header works without a cookie; a wrong one is refused.
	if a := get(t, c, srv.URL+"/api/admin/history", "Authorization", "Bearer "+adminToken); a.status != http.StatusOK {
		t.Errorf("bearer: %d", a.status)
	}
	if a := get(t, c, srv.URL+"/api/admin/history", "Authorization", "Bearer nope"); a.status != http.StatusForbidden {
		t.Errorf("wrong bearer: %d", a.status)
	}
	if strings.Contains(logs.String(), adminToken) {
		t.Error("the admin token is in the logs")
	}
}

func TestAdminAssetsAndHistoryAPI(t *testing.T) {
	_, srv, _ := newGateway(t, newFake(), nil) // no admin token: open
	c := noRedirect(nil)
	if a := get(t, c, srv.URL+"/admin"); a.status != http.StatusOK || !strings.Contains(a.body, "/admin/assets/app.js") {
		t.Fatalf("open dashboard: %d", a.status)
	}
	for _, p := range []string{"/admin/assets/app.js", "/admin/assets/style.css"} {
		if a := get(t, c, srv.URL+p); a.status != http.StatusOK || len(a.body) < 100 {
			t.Errorf("GET %s: %d, %d bytes", p, a.status, len(a.body))
		}
	}
	if a := get(t, c, srv.URL+"/admin/assets/nope.js"); a.status != http.StatusNotFound {
		t.Errorf("missing asset: %d", a.status)
	}
	a := get(t, c, srv.URL+"/api/admin/history")
	var doc gateway.HistoryDoc
	if err := json.Unmarshal([]byte(a.body), &doc); err != nil || a.status != http.StatusOK {
		t.Fatalf("history: %d %v: %s", a.status, err, a.body)
	}
	if doc.Capacity != gateway.DefaultHistoryPoints || doc.IntervalSeconds != gateway.DefaultHistoryInterval.Seconds() || doc.Points == nil {
		t.Errorf("history doc = %+v", doc)
	}
	if a := get(t, c, srv.URL+"/api/admin/history?since=yesterday"); a.status != http.StatusBadRequest || errorCode(t, a.body) != "bad_since" {
		t.Errorf("bad since: %d %s", a.status, a.body)
	}
	if doc.Window != gateway.WindowRecent || doc.Version == "" || doc.StartedUnixMs == 0 || doc.EventCounts == nil || doc.Endpoints == nil {
		t.Errorf("history doc: window %q, version %q, started %d, counts %v, endpoints %v", doc.Window, doc.Version, doc.StartedUnixMs, doc.EventCounts, doc.Endpoints)
	}
	a = get(t, c, srv.URL+"/api/admin/history?window=life")
	doc = gateway.HistoryDoc{}
	if err := json.Unmarshal([]byte(a.body), &doc); err != nil || a.status != http.StatusOK || doc.Window != gateway.WindowLife || doc.Capacity != gateway.DefaultLifePoints {
		t.Errorf("life history: %d %v: window %q, capacity %d", a.status, err, doc.Window, doc.Capacity)
	}
	if a := get(t, c, srv.URL+"/api/admin/history?window=week"); a.status != http.StatusBadRequest || errorCode(t, a.body) != "bad_window" {
		t.Errorf("bad window: %d %s", a.status, a.body)
	}
}
