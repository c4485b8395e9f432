package gradiotest

import (
	"fmt"
	"html"
	"net/http"
	"strings"
)

// routeTable is one mode's routes: the paths under the API prefix, exact or
// by prefix, each with its handler. buildRoutes makes it once at Start, so
// a mode's routes read as one list instead of a switch of mode tests.
type routeTable struct {
	exact    map[string]http.HandlerFunc // "info", "queue/join", ...
	prefixed []prefixRoute               // "heartbeat/", "call/", ...; first match wins
}

type prefixRoute struct {
	prefix string
	serve  func(w http.ResponseWriter, r *http.Request, tail string)
}

// onlyMethod answers 405 to any other method, as Gradio's FastAPI routes do.
func onlyMethod(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			methodNotAllowed(w)
			return
		}
		h(w, r)
	}
}

// postOr404 answers 404 to any method but POST: routes that real Gradio
// serves only for POST and answers Not Found otherwise.
func postOr404(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			notFound(w)
			return
		}
		h(w, r)
	}
}

// buildRoutes lays out the routes of s.Mode under its API prefix.
func (s *Server) buildRoutes() *routeTable {
	t := &routeTable{exact: map[string]http.HandlerFunc{}}
	both := func(name string, h http.HandlerFunc) { t.exact[name], t.exact[name+"/"] = h, h }
	both("info", func(w http.ResponseWriter, r *http.Request) { s.protect(w, r, s.handleInfo) })
	both("app_id", s.syncRoute(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, obj{{"app_id", s.AppIDValue()}})
	}))
	both("upload", onlyMethod(http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.protect(w, r, s.handleUpload) }))
	t.exact["reset"] = postOr404(func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, obj{{"success", true}}) })
	if s.Mode.major() < 4 {
		t.exact["queue/join"] = onlyMethod(http.MethodGet, func(w http.ResponseWriter, r *http.Request) { s.protect(w, r, s.handleJoinWS) })
	} else if s.Mode.atLeast(protoV1) {
		t.exact["queue/join"] = onlyMethod(http.MethodPost, func(w http.ResponseWriter, r *http.Request) {
			// The login check (a synchronous dependency) takes a thread.
			// A join whose client hung up while it waited for one still
			// gets it and is queued (measured on real 5.49.1 short of
			// threads: such calls ran to completion).
			ctx, cancel := s.detached(r.Context())
			defer cancel()
			release, ok := s.thread(ctx)
			if !ok {
				return
			}
			release()
			s.protect(w, r, s.handleJoin)
		})
		t.exact["queue/data"] = onlyMethod(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
			// So does the stream's (Gradio 4.x-5.x: queue/data depends on
			// login_check too; measured on real 5.49.1 short of threads,
			// its headers came up to a minute late).
			release, ok := s.thread(r.Context())
			if !ok {
				return
			}
			release()
			s.protect(w, r, s.handleData)
		})
	} else { // sse v0: the join is the GET stream, data goes up by POST
		t.exact["queue/join"] = onlyMethod(http.MethodGet, func(w http.ResponseWriter, r *http.Request) { s.protect(w, r, s.handleJoinV0) })
		t.exact["queue/data"] = onlyMethod(http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.protect(w, r, s.handleDataV0) })
	}
	if s.Mode.atLeast(protoV3) {
		t.exact["cancel"] = postOr404(s.handleCancel)
		t.prefixed = append(t.prefixed, prefixRoute{"heartbeat/", s.handleHeartbeat})
		if s.Mode.major() >= 5 {
			t.prefixed = append(t.prefixed, prefixRoute{"stream/", func(w http.ResponseWriter, r *http.Request, tail string) {
				s.protect(w, r, func(w http.ResponseWriter, r *http.Request) { s.handleStream(w, r, tail) })
			}})
		}
	}
	if s.Mode.atLeast(protoV2) {
		t.prefixed = append(t.prefixed, prefixRoute{"call/", func(w http.ResponseWriter, r *http.Request, tail string) {
			s.protect(w, r, func(w http.ResponseWriter, r *http.Request) { s.handleCall(w, r, tail) })
		}})
	}
	run := func(w http.ResponseWriter, r *http.Request, tail string) {
		if r.Method != http.MethodPost {
			notFound(w)
			return
		}
		name := strings.Trim(tail, "/")
		s.protect(w, r, func(w http.ResponseWriter, r *http.Request) { s.handleRun(w, r, name) })
	}
	t.prefixed = append(t.prefixed,
		prefixRoute{"run/", run},
		prefixRoute{"api/", run},
		prefixRoute{"file=", func(w http.ResponseWriter, r *http.Request, tail string) {
			s.protect(w, r, func(w http.ResponseWriter, r *http.Request) { s.handleFile(w, r, tail) })
		}},
	)
	return t
}

// route serves the page, /config and /login at the root (where every Gradio
// version has them) and the rest from the mode's table under the API prefix.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch p {
	case "/":
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			// The app page; clients never need it, health checks and browsers do.
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, "<!doctype html><html><head><title>%s</title></head><body><gradio-app>simulated Gradio %s app</gradio-app></body></html>\n",
				html.EscapeString(s.app.Title), s.Mode.Version())
			return
		}
	case "/config", "/config/":
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			s.handleConfig(w, r)
			return
		}
	case "/login", "/login/":
		if r.Method == http.MethodPost {
			s.handleLogin(w, r)
			return
		}
	}
	rest, ok := strings.CutPrefix(p, s.prefix()+"/")
	if !ok {
		notFound(w)
		return
	}
	if h := s.routes.exact[rest]; h != nil {
		h(w, r)
		return
	}
	for _, pr := range s.routes.prefixed {
		if tail, ok := strings.CutPrefix(rest, pr.prefix); ok {
			pr.serve(w, r, tail)
			return
		}
	}
	notFound(w)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		http.Error(w, "Internal Server Error", 500)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func detail(w http.ResponseWriter, status int, msg any) {
	writeJSON(w, status, obj{{"detail", msg}})
}

func notFound(w http.ResponseWriter) { detail(w, http.StatusNotFound, "Not Found") }

func methodNotAllowed(w http.ResponseWriter) {
	detail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
}

func internalError(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(http.StatusText(status)))
}
