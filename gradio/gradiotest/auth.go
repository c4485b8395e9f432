package gradiotest

import (
	"errors"
	"net/http"
)

// SetHFToken changes HFToken at run time ("" makes the replica public).
func (s *Server) SetHFToken(token string) {
	s.mu.Lock()
	s.hfToken = token
	s.mu.Unlock()
}

// addJWT records a __sign token issued for this replica by a Hub.
func (s *Server) addJWT(tok string) {
	s.mu.Lock()
	if s.jwts != nil {
		s.jwts[tok] = true
	}
	s.mu.Unlock()
}

func (s *Server) tokenOK(r *http.Request) bool {
	s.mu.Lock()
	tok := s.hfToken
	signed := s.jwts[r.URL.Query().Get("__sign")]
	s.mu.Unlock()
	if tok == "" || signed {
		return true
	}
	want := "Bearer " + tok
	return r.Header.Get("Authorization") == want || r.Header.Get("X-HF-Authorization") == want
}

func (s *Server) authRequired() bool { return s.Username != "" }

func (s *Server) authorized(r *http.Request) bool {
	if !s.authRequired() {
		return true
	}
	for _, name := range []string{"access-token-" + s.cookieID, "access-token-unsecure-" + s.cookieID} {
		if c, err := r.Cookie(name); err == nil && c.Value == s.token {
			return true
		}
	}
	return false
}

func (s *Server) protect(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	if !s.authorized(r) {
		if s.Mode.major() >= 5 {
			detail(w, http.StatusUnauthorized, obj{{"error", "Not authenticated"}, {"auth_message", nil}})
		} else {
			detail(w, http.StatusUnauthorized, "Not authenticated")
		}
		return
	}
	h(w, r)
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	if !s.authRequired() {
		http.Redirect(w, r, "/", http.StatusFound)
		return
	}
	if err := r.ParseMultipartForm(1 << 20); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		detail(w, 422, []obj{{{"type", "missing"}, {"loc", []any{"body", "username"}}, {"msg", "Field required"}, {"input", nil}}})
		return
	}
	user, pass := r.PostFormValue("username"), r.PostFormValue("password")
	if user == "" || r.PostForm == nil || !r.PostForm.Has("password") {
		detail(w, 422, []obj{{{"type", "missing"}, {"loc", []any{"body", "username"}}, {"msg", "Field required"}, {"input", nil}}})
		return
	}
	if user != s.Username || pass != s.Password {
		detail(w, http.StatusBadRequest, "Incorrect credentials.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: "access-token-" + s.cookieID, Value: s.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteNoneMode, Secure: true})
	http.SetCookie(w, &http.Cookie{Name: "access-token-unsecure-" + s.cookieID, Value: s.token, Path: "/", HttpOnly: true})
	writeJSON(w, 200, obj{{"success", true}})
}
