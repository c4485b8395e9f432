package gradiotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// Defaults of the knobs.
const (
	DefaultStepDelay        = 300 * time.Millisecond // the captured count endpoint
	DefaultConcurrencyLimit = 1                      // Gradio's default per event listener
	DefaultFaultStatus      = http.StatusInternalServerError
	DefaultSlowBodyChunk    = 64 // bytes written per SlowBody delay
	DefaultStateTTL         = time.Hour
	v0SendDataTimeout       = 5 * time.Second
)

// Server is a simulated Gradio app served over HTTP on loopback, in the
// manner of net/http/httptest.Server. A zero Server works: Start listens on
// 127.0.0.1:0 and serves DefaultApp. Set its fields before Start; they must
// not change afterwards (the embedded Knobs are only start values: use the
// methods to change knobs at run time).
type Server struct {
	// URL is the base URL, http://127.0.0.1:port, without a trailing slash.
	URL string
	// Listener is where the server listens; set it before Start to choose the
	// address (NewUnstartedServer listens on 127.0.0.1:0).
	Listener net.Listener
	// Mode is the imitated Gradio generation. Zero: Gradio5.
	Mode Mode
	// App is the simulated app. Nil: DefaultApp().
	App *App
	// Username and Password, when Username is set, protect the app with
	// Gradio's login (POST /login, cookies, 401 on protected routes).
	Username, Password string
	// AppID is the config app_id. Zero: random above 2^63 (new on each Start
	// and Restart).
	AppID uint64
	// UploadDir is where uploads and produced files live. Empty: a fresh
	// temporary directory removed by Close.
	UploadDir string
	// HFToken, when set, makes the replica behave like a private Space behind
	// the Hugging Face proxy: every request (except /_sim/) must carry
	// "Authorization: Bearer <HFToken>" or "X-HF-Authorization: Bearer
	// <HFToken>" (or a ?__sign= JWT the Hub issued for it), else 401 with a
	// non-JSON body. Change it at run time with SetHFToken.
	HFToken string
	// KeepAliveTimeout closes a kept-alive connection idle for that long
	// after its last response, as uvicorn's timeout_keep_alive does (5 s
	// in Gradio). Zero: idle connections are never closed by the server.
	KeepAliveTimeout time.Duration
	// FirstComponentID is the id of the app's first block (zero: 1, as
	// Gradio numbers them). Real releases number one app's blocks
	// differently (4.x adds a form block in a tab that 5.x does not), so
	// replicas of one app on two releases give its components other ids:
	// a base other than 1 stands for that.
	FirstComponentID int
	// Logger receives request and fault logs. Nil: no logging.
	Logger *slog.Logger
	// MaxThreads is the size of the app's worker thread pool, as Gradio's
	// max_threads (40 by default in Gradio): a running event's function
	// holds a thread from its start to its end, and the synchronous
	// routes (app_id, which is the gateway's ping, and queue/join's login
	// check) wait for a free one, so an app whose threads are all busy
	// answers them late while its streams go on. Zero: unlimited (set it
	// before Start).
	MaxThreads int
	// IgnoresDroppedStreams makes the server never notice a dropped
	// queue/data stream, as real Gradio 4.20.1 (sse_v2) does: its CORS
	// middleware is a Starlette BaseHTTPMiddleware, under which
	// request.is_disconnected() stays false, so a session's queued calls
	// stay queued and run later for nobody (measured: 30 s after the
	// drop). Off, every sse mode drops them as 4.16 and 4.44-5.x do.
	IgnoresDroppedStreams bool

	// Knobs are the start values of the run-time knobs.
	Knobs

	threads   chan struct{} // MaxThreads tokens; nil: unlimited
	httpSrv   *http.Server
	baseCtx   context.Context
	stop      context.CancelFunc
	wg        sync.WaitGroup // running jobs and helper goroutines
	uploadDir string
	ownsDir   bool
	cookieID  string
	token     string
	app       *App
	compIDs   [][2][]int // per endpoint: input and output component ids
	tabs      []tabLayout
	tabsID    int
	stateIDs  map[int]json.RawMessage
	closeOnce sync.Once

	mu       sync.Mutex // guards everything below; nothing slow runs under it
	knobs    Knobs
	start    Knobs // knobs at Start, for /_sim/reset
	appID    uint64
	sessions map[string]*simSession
	events   map[string]*event // live events by id
	callSess map[string]string // /call event id -> session hash
	groups   []*group          // per endpoint
	routes   *routeTable       // the mode's routes, built at Start
	unstall  chan struct{}     // closed when Stall is cleared
	wakeT    *time.Timer
	wakeIn   time.Duration
	hubGate  func() bool // set by a Hub: whether its Space lets the app answer
	conns    map[net.Conn]bool
	hfToken  string
	jwts     map[string]bool // __sign values issued by a Hub
	execs    counters
	reqs     counters
	closed   bool
}

// NewServer starts and returns a server for app (nil: DefaultApp()). It
// panics if it cannot listen, like httptest.NewServer.
func NewServer(app *App) *Server {
	s := NewUnstartedServer(app)
	s.Start()
	return s
}

// NewUnstartedServer returns a server listening on 127.0.0.1:0 that does
// not serve yet: set fields, then call Start.
func NewUnstartedServer(app *App) *Server {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic("gradiotest: failed to listen on a port: " + err.Error())
	}
	return &Server{Listener: l, App: app}
}

// Start starts serving. It panics on setup failure or when called twice.
func (s *Server) Start() {
	if s.httpSrv != nil {
		panic("gradiotest: Server already started")
	}
	if s.Listener == nil {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic("gradiotest: failed to listen on a port: " + err.Error())
		}
		s.Listener = l
	}
	if s.Mode == "" {
		s.Mode = Gradio5
	}
	if _, ok := modeInfos[s.Mode]; !ok {
		panic(fmt.Sprintf("gradiotest: unknown Mode %q", s.Mode))
	}
	s.app = s.App
	if s.app == nil {
		s.app = DefaultApp()
	}
	if s.MaxThreads > 0 {
		s.threads = make(chan struct{}, s.MaxThreads)
	}
	s.uploadDir = s.UploadDir
	if s.uploadDir == "" {
		d, err := os.MkdirTemp("", "gradiotest-")
		if err != nil {
			panic("gradiotest: " + err.Error())
		}
		s.uploadDir, s.ownsDir = d, true
	}
	if abs, err := filepath.Abs(s.uploadDir); err == nil {
		s.uploadDir = abs
	}
	if real, err := filepath.EvalSymlinks(s.uploadDir); err == nil {
		s.uploadDir = real
	}
	s.cookieID = randHex(16)
	s.token = randHex(16)
	s.appID = s.AppID
	if s.appID == 0 {
		s.appID = newAppID()
	}
	s.knobs, s.start = s.Knobs, s.Knobs
	s.hfToken = s.HFToken
	s.jwts = map[string]bool{}
	s.sessions = map[string]*simSession{}
	s.events = map[string]*event{}
	s.callSess = map[string]string{}
	s.unstall = make(chan struct{})
	if !s.knobs.Stall {
		close(s.unstall)
	}
	s.buildComponents()
	s.routes = s.buildRoutes()
	for _, ep := range s.app.Endpoints {
		s.groups = append(s.groups, &group{ep: ep})
	}
	s.baseCtx, s.stop = context.WithCancel(context.Background())
	s.URL = "http://" + s.Listener.Addr().String()
	s.conns = map[net.Conn]bool{}
	s.httpSrv = &http.Server{Handler: s, ReadHeaderTimeout: time.Minute, ConnState: s.trackConn, IdleTimeout: s.KeepAliveTimeout}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.httpSrv.Serve(s.Listener)
	}()
}

// Close stops the server: running handlers are cancelled and waited for,
// open streams end, and the temporary upload directory is removed. Safe to
// call more than once.
func (s *Server) Close() {
	if s.httpSrv == nil {
		if s.Listener != nil {
			_ = s.Listener.Close() // never started
		}
		return
	}
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		if s.wakeT != nil {
			s.wakeT.Stop()
		}
		for _, ev := range s.events {
			ev.kill()
		}
		s.mu.Unlock()
		s.stop() // ends handler contexts, streams, stalls and sleeps
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.httpSrv.Shutdown(ctx); err != nil {
			s.logf("gradiotest: forcing close after 5s: %v", err)
			_ = s.httpSrv.Close()
		}
		cancel()
		s.wg.Wait()
		if s.ownsDir {
			_ = os.RemoveAll(s.uploadDir)
		}
	})
}

// CloseClientConnections abruptly closes every open client connection, as
// a network failure would; the server keeps serving new ones.
func (s *Server) CloseClientConnections() {
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (s *Server) trackConn(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = true
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	}
}

// Executions reports how many times the handler of apiName started running
// (with or without a leading "/").
func (s *Server) Executions(apiName string) int { return s.execs.get(apiName) }

// Requests reports how many requests reached a route (counted before any
// fault applies). Route names: "config", "login", "info", "app_id",
// "queue/join", "queue/data", "heartbeat", "cancel", "reset", "call", "run",
// "upload", "file"; anything else is "other".
func (s *Server) Requests(route string) int { return s.reqs.get(route) }

// routeName maps a path to the name Requests uses.
func routeName(p, prefix string) string {
	switch strings.TrimSuffix(p, "/") {
	case "/config":
		return "config"
	case "/login":
		return "login"
	}
	rest, ok := strings.CutPrefix(p, prefix+"/")
	if !ok {
		return "other"
	}
	rest = strings.TrimSuffix(rest, "/")
	switch {
	case rest == "info", rest == "app_id", rest == "queue/join", rest == "queue/data", rest == "cancel", rest == "reset", rest == "upload":
		return rest
	case strings.HasPrefix(rest, "heartbeat/"):
		return "heartbeat"
	case strings.HasPrefix(rest, "call/"):
		return "call"
	case strings.HasPrefix(rest, "run/"), strings.HasPrefix(rest, "api/"):
		return "run"
	case strings.HasPrefix(rest, "file="):
		return "file"
	}
	return "other"
}

// AllExecutions returns the execution counts of every endpoint that ran.
func (s *Server) AllExecutions() map[string]int { return s.execs.snapshot() }

// AppIDValue is the current config app_id.
func (s *Server) AppIDValue() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appID
}

func (s *Server) mode() Mode     { return s.Mode }
func (s *Server) prefix() string { return s.Mode.APIPrefix() }

func (s *Server) scaled(d time.Duration) time.Duration {
	ts := s.knobsNow().TimeScale
	if ts <= 0 {
		return d
	}
	return time.Duration(float64(d) * ts)
}

func (s *Server) heartbeatInterval() time.Duration {
	if d := s.knobsNow().HeartbeatInterval; d > 0 {
		return d
	}
	return gradio.DefaultHeartbeatInterval // Gradio's GRADIO_HEARTBEAT_INTERVAL
}

func (s *Server) logf(format string, args ...any) {
	if s.Logger != nil {
		s.Logger.Info(fmt.Sprintf(format, args...))
	}
}

func newAppID() uint64 { return 1<<63 | mrand.Uint64() }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ServeHTTP routes a request. It is exported so a started Server can also be
// mounted in another mux; before Start it answers 503.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.baseCtx == nil {
		http.Error(w, "gradiotest: Server not started", http.StatusServiceUnavailable)
		return
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.logf("gradiotest: panic serving %s %s: %v", r.Method, r.URL.Path, v)
			http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		}
	}()
	if strings.HasPrefix(r.URL.Path, "/_sim/") {
		s.serveControl(w, r)
		return
	}
	s.reqs.inc(routeName(r.URL.Path, s.prefix()))
	k := s.knobsNow()
	if k.Stall {
		s.mu.Lock()
		ch := s.unstall
		s.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		case <-s.baseCtx.Done():
			return
		}
	}
	if !s.tokenOK(r) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte("<!DOCTYPE html><html><body><h1>401</h1><p>Unauthorized: this Space is private.</p></body></html>\n"))
		return
	}
	if g := s.hubGateNow(); g != nil && !g() {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("503 Service Unavailable: the Space is not running\n"))
		return
	}
	if k.Asleep {
		s.poke()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("503 Service Unavailable: the Space is starting up\n"))
		return
	}
	if k.SlowBody > 0 {
		w = &slowWriter{ResponseWriter: w, delay: k.SlowBody, ctx: r.Context(), done: s.baseCtx.Done()}
	}
	if k.Hostile != HostileOff && s.serveHostile(w, r, k) {
		return
	}
	s.route(w, r)
}

// --- login ---

// rootURL computes config["root"] like route_utils.get_root_url.
func rootURL(r *http.Request) string {
	host := r.Host
	if h := r.Header.Get("X-Forwarded-Host"); h != "" {
		host = strings.TrimSpace(strings.Split(h, ",")[0])
	}
	scheme := "http"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme = "https"
	}
	return scheme + "://" + host
}

// thread waits for a worker thread (MaxThreads) and returns its release;
// false when ctx ended first.
func (s *Server) thread(ctx context.Context) (release func(), ok bool) {
	if s.threads == nil {
		return func() {}, true
	}
	select {
	case s.threads <- struct{}{}:
		return func() { <-s.threads }, true
	case <-ctx.Done():
		return nil, false
	}
}

// detached is ctx without its request's cancellation, ended by the
// server's close: work a client's hang-up does not stop.
func (s *Server) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(s.baseCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

// syncRoute runs h on a worker thread, as FastAPI runs Gradio's
// synchronous routes and dependencies.
func (s *Server) syncRoute(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		release, ok := s.thread(r.Context())
		if !ok {
			return
		}
		defer release()
		h(w, r)
	}
}
