package gateway

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
)

// adminUI is the dashboard: one HTML page, its script and style sheet, all
// embedded (no build step, nothing fetched from elsewhere).
//
//go:embed adminui
var adminUI embed.FS

var (
	adminAssets = func() http.Handler {
		sub, err := fs.Sub(adminUI, "adminui/assets")
		if err != nil {
			panic(err) // the embed pattern above guarantees the directory
		}
		return http.StripPrefix("/admin/assets/", http.FileServerFS(sub))
	}()
	loginPage = template.Must(template.ParseFS(adminUI, "adminui/login.html"))
)

// maxLoginBody bounds the login form.
const maxLoginBody = 4 << 10

// initAdmin creates the history the dashboard shows and feeds it from the
// metrics' hooks.
func (g *Gateway) initAdmin() {
	g.history = newHistory(g.backend, g.cfg.Pool.MaxConnections, defaultHistoryInterval, defaultHistoryPoints, defaultHistoryEvents)
	if g.autoscale != nil {
		g.history.autoscale = g.autoscale.ctl.Status
	}
	g.metrics.hooks.add(g.history.observeCall, g.history.onPoolEvent)
}

// adminRoutes registers the dashboard and the history API on m.
func (g *Gateway) adminRoutes(m *http.ServeMux) {
	m.Handle("GET /admin", g.wrap("GET /admin", authNone, g.handleAdminPage))
	m.Handle("GET /admin/{$}", g.wrap("GET /admin/{$}", authNone, g.handleAdminPage))
	m.Handle("POST /admin/login", g.wrap("POST /admin/login", authNone, g.handleAdminLogin))
	m.Handle("POST /admin/logout", g.wrap("POST /admin/logout", authNone, g.handleAdminLogout))
	m.Handle("GET /admin/assets/", g.wrap("GET /admin/assets/", authNone, adminAssets.ServeHTTP))
	m.Handle("GET /api/admin/history", g.wrap("GET /api/admin/history", authAdmin, g.handleHistory))
}

// RunHistory samples the dashboard's history until ctx ends. Serve runs
// it; call it yourself only when serving the Gateway with another server.
func (g *Gateway) RunHistory(ctx context.Context) {
	g.history.Run(ctx)
}

func setPageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	// Everything comes from here; no inline script.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
}

// handleAdminPage serves the dashboard, or the login form when the request
// carries no valid admin credential.
func (g *Gateway) handleAdminPage(w http.ResponseWriter, r *http.Request) {
	ok, presented := g.adminAuth(r)
	if !ok {
		msg := ""
		if presented {
			msg = "That token is not valid (or your login expired)."
		}
		g.writeLogin(w, http.StatusUnauthorized, msg)
		return
	}
	page, err := adminUI.ReadFile("adminui/index.html")
	if err != nil {
		writeError(w, &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "the dashboard is missing from the binary"})
		return
	}
	setPageHeaders(w)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(page)
}

func (g *Gateway) writeLogin(w http.ResponseWriter, status int, msg string) {
	setPageHeaders(w)
	w.WriteHeader(status)
	_ = loginPage.Execute(w, struct {
		Message string
		Open    bool
	}{msg, g.adminToken() == ""})
}

// crossOrigin refuses cross-site form posts to the login and logout
// (Sec-Fetch-Site, else Origin against Host: the standard library's check).
var crossOrigin = http.NewCrossOriginProtection()

// handleAdminLogin checks the token of the login form and sets the login
// cookie; the token is compared in constant time and never echoed.
func (g *Gateway) handleAdminLogin(w http.ResponseWriter, r *http.Request) {
	if crossOrigin.Check(r) != nil {
		writeError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: "cross-site login refused"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		g.writeLogin(w, http.StatusBadRequest, "The login form could not be read.")
		return
	}
	if g.adminToken() == "" {
		http.Redirect(w, r, "/admin", http.StatusSeeOther)
		return
	}
	tok := r.PostForm.Get("token")
	if tok == "" || !matchAny(tok, []string{g.adminToken()}) {
		g.writeLogin(w, http.StatusForbidden, "That token is not valid.")
		return
	}
	http.SetCookie(w, g.newAdminCookie(r))
	http.Redirect(w, r, "/admin", http.StatusSeeOther)
}

func (g *Gateway) handleAdminLogout(w http.ResponseWriter, r *http.Request) {
	if crossOrigin.Check(r) != nil {
		writeError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden", Message: "cross-site logout refused"})
		return
	}
	if c, err := r.Cookie(adminCookie); err == nil {
		if id, exp, ok := g.parseAdminCookie(c.Value); ok {
			g.logins.revoke(id, exp, g.now())
		}
	}
	http.SetCookie(w, &http.Cookie{Name: adminCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: isTLS(r)})
	http.Redirect(w, r, "/admin", http.StatusSeeOther)
}

// handleHistory serves the history as JSON; ?since=<Unix ms> returns only
// the points taken after it (the dashboard polls with the last it has);
// ?window=life the since-start series instead of the recent one.
func (g *Gateway) handleHistory(w http.ResponseWriter, r *http.Request) {
	var since int64
	window := r.URL.Query().Get("window")
	if window != "" && window != windowRecent && window != windowLife {
		writeError(w, badRequest("bad_window", "window must be recent or life"))
		return
	}
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, badRequest("bad_since", "since must be a time in Unix milliseconds"))
			return
		}
		since = n
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, g.history.Doc(window, since))
}
