package gradiotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Defaults of the knobs.
const (
	DefaultHeartbeatInterval = 15 * time.Second       // Gradio's GRADIO_HEARTBEAT_INTERVAL
	DefaultStepDelay         = 300 * time.Millisecond // the captured count endpoint
	DefaultConcurrencyLimit  = 1                      // Gradio's default per event listener
	DefaultFaultStatus       = http.StatusInternalServerError
	DefaultSlowBodyChunk     = 64 // bytes written per SlowBody delay
	DefaultStateTTL          = time.Hour
	v0SendDataTimeout        = 5 * time.Second
)

// Knobs are the run-time behaviour and fault settings of a Server. Set them as
// fields of Server (Knobs is embedded) before Start; at run time use
// SetKnobs, UpdateKnobs or the helper methods, or POST /_sim/faults. Every zero
// value means the documented default.
type Knobs struct {
	// ConnectCost delays every answer to /config and /info (and, in sim, the
	// Hub look-up) to play a slow connect. Zero: none.
	ConnectCost time.Duration
	// ConnectJitter adds a uniformly random extra delay in [0, ConnectJitter)
	// to each ConnectCost wait (the seed saw 2-5 s: ConnectCost 2s, jitter 3s).
	ConnectJitter time.Duration
	// Latency is added to every call after process_starts, before the handler.
	Latency time.Duration
	// StepDelay is the pause between yields of the built-in count generator
	// (Call.StepDelay). Zero: DefaultStepDelay (300 ms); negative: none.
	StepDelay time.Duration
	// TimeScale multiplies the built-in sleeps (slow's seconds, StepDelay,
	// Call.Sleep) so tests can compress time. Zero: 1.
	TimeScale float64
	// HeartbeatInterval is the period of heartbeat messages on data streams
	// and of ALIVE on /heartbeat. Zero: DefaultHeartbeatInterval (15 s).
	HeartbeatInterval time.Duration
	// MaxQueueSize is the queue's max_size: joins beyond that many waiting
	// events get 503 "Queue is full". Zero: unlimited.
	MaxQueueSize int
	// DefaultConcurrencyLimit applies to endpoints whose ConcurrencyLimit is
	// zero. Zero: 1 (Gradio's default); negative: unlimited.
	DefaultConcurrencyLimit int
	// MaxFileSize is max_file_size in bytes: larger uploads get 413. Zero:
	// unlimited (config says null).
	MaxFileSize int64
	// StateTTL is how long a session's gr.State values survive after its
	// /heartbeat connection closes (Gradio: 1 h); a new heartbeat or call
	// within it keeps them. Zero: DefaultStateTTL; negative: forever.
	StateTTL time.Duration

	// FaultStatus is the status code of FailConfig and FailJoin answers.
	// Zero: 500.
	FaultStatus int
	// FailConfig makes the next N GET /config answer FaultStatus.
	FailConfig int
	// FailJoin makes the next N queue joins (and /call POSTs) answer FaultStatus.
	FailJoin int
	// CutStream breaks the data stream (connection aborted without a proper
	// end) right after each of the next N process_starts messages it carries;
	// the server then drops that session's events as Gradio does on a
	// disconnect.
	CutStream int
	// Stall makes every request (except /_sim/) hang without an answer until
	// Stall is cleared, the client gives up, or the server closes.
	Stall bool
	// SlowBody trickles every response: DefaultSlowBodyChunk bytes, then a
	// pause of SlowBody. Zero: off.
	SlowBody time.Duration
	// QueueFull makes every join answer 503 "Queue is full" as if MaxQueueSize
	// were reached.
	QueueFull bool
	// Asleep makes the replica answer 503 to everything but /_sim/, like a
	// sleeping or restarting Space. Wake() (or the Hub) clears it.
	Asleep bool
}

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
	// Logger receives request and fault logs. Nil: no logging.
	Logger *slog.Logger

	// Knobs are the start values of the run-time knobs.
	Knobs

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
	sessions map[string]*session
	events   map[string]*event // live events by id
	callSess map[string]string // /call event id -> session hash
	groups   []*group          // per endpoint
	unstall  chan struct{}     // closed when Stall is cleared
	wakeT    *time.Timer
	wakeIn   time.Duration
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
	s.sessions = map[string]*session{}
	s.events = map[string]*event{}
	s.callSess = map[string]string{}
	s.unstall = make(chan struct{})
	if !s.knobs.Stall {
		close(s.unstall)
	}
	s.buildComponents()
	for _, ep := range s.app.Endpoints {
		s.groups = append(s.groups, &group{ep: ep})
	}
	s.baseCtx, s.stop = context.WithCancel(context.Background())
	s.URL = "http://" + s.Listener.Addr().String()
	s.conns = map[net.Conn]bool{}
	s.httpSrv = &http.Server{Handler: s, ReadHeaderTimeout: time.Minute, ConnState: s.trackConn}
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

// CurrentKnobs returns the knobs in force now.
func (s *Server) CurrentKnobs() Knobs { return s.knobsNow() }

// SetKnobs replaces all knobs at run time.
func (s *Server) SetKnobs(k Knobs) { s.UpdateKnobs(func(p *Knobs) { *p = k }) }

// UpdateKnobs changes knobs at run time under the server's lock; f must not
// block.
func (s *Server) UpdateKnobs(f func(*Knobs)) {
	s.mu.Lock()
	was := s.knobs
	f(&s.knobs)
	s.knobsChangedLocked(was)
	s.mu.Unlock()
}

func (s *Server) knobsChangedLocked(was Knobs) {
	if was.Stall && !s.knobs.Stall {
		close(s.unstall)
	} else if !was.Stall && s.knobs.Stall {
		s.unstall = make(chan struct{})
	}
	if was.Asleep && !s.knobs.Asleep && s.wakeT != nil {
		s.wakeT.Stop()
		s.wakeT = nil
	}
	if !was.Asleep && s.knobs.Asleep {
		s.wakeIn = 0
	}
	for _, g := range s.groups {
		s.dispatchLocked(g)
	}
}

// FailNextConfigs makes the next n GET /config answer FaultStatus.
func (s *Server) FailNextConfigs(n int) { s.UpdateKnobs(func(k *Knobs) { k.FailConfig = n }) }

// FailNextJoins makes the next n joins answer FaultStatus.
func (s *Server) FailNextJoins(n int) { s.UpdateKnobs(func(k *Knobs) { k.FailJoin = n }) }

// CutNextStreams makes the next n data streams break mid-event.
func (s *Server) CutNextStreams(n int) { s.UpdateKnobs(func(k *Knobs) { k.CutStream = n }) }

// SetStall turns the stall fault on or off.
func (s *Server) SetStall(on bool) { s.UpdateKnobs(func(k *Knobs) { k.Stall = on }) }

// SetQueueFull turns the queue-full fault on or off.
func (s *Server) SetQueueFull(on bool) { s.UpdateKnobs(func(k *Knobs) { k.QueueFull = on }) }

// Sleep puts the replica to sleep: it answers 503 until Wake. If wakeAfter
// is positive, the first request that reaches the sleeping replica (or a Hub
// look-up of its Space) starts a timer that wakes it after wakeAfter, like a
// Space that boots when visited.
func (s *Server) Sleep(wakeAfter time.Duration) {
	s.mu.Lock()
	was := s.knobs
	s.knobs.Asleep = true
	s.knobsChangedLocked(was)
	s.wakeIn = wakeAfter
	s.mu.Unlock()
}

// Wake ends Sleep (and the Asleep knob) at once.
func (s *Server) Wake() { s.UpdateKnobs(func(k *Knobs) { k.Asleep = false }) }

// Asleep reports whether the replica is asleep.
func (s *Server) Asleep() bool { return s.knobsNow().Asleep }

// poke is a visit to a sleeping replica: it starts the wake-up timer.
func (s *Server) poke() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.knobs.Asleep || s.wakeIn <= 0 || s.wakeT != nil || s.closed {
		return
	}
	s.wakeT = time.AfterFunc(s.wakeIn, func() {
		s.mu.Lock()
		s.wakeT = nil
		was := s.knobs
		s.knobs.Asleep = false
		s.knobsChangedLocked(was)
		s.mu.Unlock()
	})
}

// Restart simulates a process restart on the same address: a new app_id,
// every session, state and queued or running event dropped (running handlers
// are cancelled), open streams told "Server stopped unexpectedly.".
func (s *Server) Restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appID = newAppID()
	for _, ev := range s.events {
		ev.kill()
		ev.q.stopped = true
		ev.q.signal()
		if ev.status == statusQueued {
			ev.group.remove(ev)
		}
	}
	s.events = map[string]*event{}
	for _, sess := range s.sessions {
		sess.stopped = true
		sess.signal()
	}
	s.sessions = map[string]*session{}
	s.callSess = map[string]string{}
}

// ResetFaults restores the knobs given at Start and zeroes the execution
// counters.
func (s *Server) ResetFaults() {
	s.mu.Lock()
	was := s.knobs
	s.knobs = s.start
	s.knobsChangedLocked(was)
	s.mu.Unlock()
	s.execs.reset()
	s.reqs.reset()
}

func (s *Server) knobsNow() Knobs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.knobs
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
	return DefaultHeartbeatInterval
}

// takeFault decrements a fault counter and reports whether it fired.
func (s *Server) takeFault(f func(*Knobs) *int) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := f(&s.knobs)
	if *p <= 0 {
		return false, 0
	}
	*p--
	st := s.knobs.FaultStatus
	if st == 0 {
		st = DefaultFaultStatus
	}
	return true, st
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
	s.route(w, r)
}

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
	pre := s.prefix()
	if !strings.HasPrefix(p, pre+"/") {
		notFound(w)
		return
	}
	rest := strings.TrimPrefix(p, pre+"/")
	v3 := s.Mode.atLeast(protoV3)
	switch {
	case rest == "info" || rest == "info/":
		s.protect(w, r, s.handleInfo)
	case rest == "app_id" || rest == "app_id/":
		writeJSON(w, 200, obj{{"app_id", s.AppIDValue()}})
	case rest == "queue/join":
		if s.Mode.atLeast(protoV1) && r.Method == http.MethodPost {
			s.protect(w, r, s.handleJoin)
		} else if !s.Mode.atLeast(protoV1) && r.Method == http.MethodGet {
			s.protect(w, r, s.handleJoinV0)
		} else {
			methodNotAllowed(w)
		}
	case rest == "queue/data":
		if s.Mode.atLeast(protoV1) && r.Method == http.MethodGet {
			s.protect(w, r, s.handleData)
		} else if !s.Mode.atLeast(protoV1) && r.Method == http.MethodPost {
			s.protect(w, r, s.handleDataV0)
		} else {
			methodNotAllowed(w)
		}
	case strings.HasPrefix(rest, "heartbeat/") && v3:
		s.handleHeartbeat(w, r, strings.TrimPrefix(rest, "heartbeat/"))
	case rest == "cancel" && v3 && r.Method == http.MethodPost:
		s.handleCancel(w, r)
	case rest == "reset" && r.Method == http.MethodPost:
		writeJSON(w, 200, obj{{"success", true}})
	case strings.HasPrefix(rest, "call/") && s.Mode.atLeast(protoV2):
		s.protect(w, r, func(w http.ResponseWriter, r *http.Request) { s.handleCall(w, r, strings.TrimPrefix(rest, "call/")) })
	case (strings.HasPrefix(rest, "run/") || strings.HasPrefix(rest, "api/")) && r.Method == http.MethodPost:
		name := strings.Trim(rest[4:], "/")
		s.protect(w, r, func(w http.ResponseWriter, r *http.Request) { s.handleRun(w, r, name) })
	case rest == "upload" || rest == "upload/":
		if r.Method != http.MethodPost {
			methodNotAllowed(w)
			return
		}
		s.protect(w, r, s.handleUpload)
	case strings.HasPrefix(rest, "file="):
		s.protect(w, r, func(w http.ResponseWriter, r *http.Request) { s.handleFile(w, r, strings.TrimPrefix(rest, "file=")) })
	default:
		notFound(w)
	}
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

// slowWriter trickles a response body.
type slowWriter struct {
	http.ResponseWriter
	delay time.Duration
	ctx   context.Context
	done  <-chan struct{}
}

func (sw *slowWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := min(len(b), DefaultSlowBodyChunk)
		m, err := sw.ResponseWriter.Write(b[:c])
		n += m
		if err != nil {
			return n, err
		}
		b = b[c:]
		if f, ok := sw.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		t := time.NewTimer(sw.delay)
		select {
		case <-t.C:
		case <-sw.ctx.Done():
			t.Stop()
			return n, sw.ctx.Err()
		case <-sw.done:
			t.Stop()
			return n, errors.New("gradiotest: server closed")
		}
	}
	return n, nil
}

func (sw *slowWriter) Flush() {
	if f, ok := sw.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

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

// --- login ---

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
