package frontdoor

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// Defaults of [Config].
const (
	DefaultSessionTTL = time.Hour
	DefaultUploadTTL  = time.Hour
	// DefaultFileURLTTL: a page's output files stay downloadable for an
	// hour, and a URL that leaks (a log, a shared link) is not a
	// capability for ever.
	DefaultFileURLTTL = time.Hour
	// DefaultMaxBodyBytes is also the gateway's max_body_bytes default.
	DefaultMaxBodyBytes = 10 << 20
	// DefaultReadGrace is long enough for a client to open its data
	// stream after the join's answer (the official clients do at once),
	// short enough that joins nobody reads cannot hold the pool's slots.
	DefaultReadGrace = 5 * time.Second
	// DefaultMaxSessions bounds the caller sessions kept (about 1 KiB
	// each): 20 MiB at most.
	DefaultMaxSessions = 20000
	// DefaultMaxSessionsPerClient leaves room for many browser tabs (or
	// users behind one address) while one client cannot fill the table.
	DefaultMaxSessionsPerClient = 500
	// DefaultMaxFilesPerUpload bounds the parts of one upload request: a
	// browser sends one part per file the user picked.
	DefaultMaxFilesPerUpload = 100
	// DefaultMaxUploadBytesPerClient and DefaultMaxUploadBytes bound the
	// disk the uploads waiting for their joins take.
	DefaultMaxUploadBytesPerClient = 1 << 30
	DefaultMaxUploadBytes          = 8 << 30
)

// UserHeader names the caller's user (an e-mail); absent means anonymous.
const UserHeader = "X-Gradiopool-User"

// Config configures a [FrontDoor]. The zero value works.
type Config struct {
	// SessionTTL is how long a caller session is kept after its last
	// request when it has no stream open. Zero means DefaultSessionTTL.
	SessionTTL time.Duration
	// UploadTTL is how long an upload is kept for the joins that use it.
	// Zero means DefaultUploadTTL.
	UploadTTL time.Duration
	// HeartbeatInterval is the period of "data: ALIVE" on
	// /heartbeat/{session_hash}. Zero means gradio.DefaultHeartbeatInterval
	// (Gradio's own, 15 s).
	HeartbeatInterval time.Duration
	// MaxBodyBytes bounds a join, cancel or reset body. Zero means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ReadGrace is how long an accepted call may wait for its caller to
	// open the session's queue/data stream: past it, with no stream open,
	// the call is cancelled at the replica and its slot freed (a join
	// nobody reads would hold a slot for ever). Zero means
	// DefaultReadGrace; negative: never. Not applied with OnForeignEnd
	// set (a cluster), where the stream may be open at another gateway.
	ReadGrace time.Duration
	// MaxSessions bounds the caller sessions this front door keeps; a new
	// one past it is answered 503. Zero means DefaultMaxSessions;
	// negative: no limit.
	MaxSessions int
	// MaxSessionsPerClient bounds the caller sessions of one client
	// (ClientID); a new one past it is answered 429. Zero means
	// DefaultMaxSessionsPerClient; negative: no limit.
	MaxSessionsPerClient int
	// ClientID names a request's client for MaxSessionsPerClient (the
	// gateway: its API key's hash, else its address). Nil: the keyed
	// hash of Authorization, else the remote address's host.
	ClientID func(r *http.Request) string
	// BeginCall, if set, counts a join against its client's limit (the
	// gateway's max_calls_per_client) until the call ends; ok false: the
	// join is answered 429. Nil: no limit.
	BeginCall func(r *http.Request) (release func(), ok bool)
	// MaxFileBytes bounds one uploaded file (413 past it). Zero means
	// the app's max_file_size when its config has one, else MaxBodyBytes;
	// negative: no limit.
	MaxFileBytes int64
	// MaxFilesPerUpload bounds the parts of one upload request (413 past
	// it). Zero means DefaultMaxFilesPerUpload; negative: no limit.
	MaxFilesPerUpload int
	// MaxUploadBytesPerClient bounds the upload bytes one client
	// (ClientID) has on disk (429 past it) and MaxUploadBytes everyone's
	// (503). Zero means the defaults; negative: no limit.
	MaxUploadBytesPerClient int64
	MaxUploadBytes          int64
	// UploadDir holds uploads until their join. Empty means a fresh
	// temporary directory, removed by Close.
	UploadDir string
	// TrustForwarded makes the announced root honour X-Forwarded-Proto and
	// X-Forwarded-Host (set it only behind a proxy that sets them).
	TrustForwarded bool
	// FileURLTTL is how long a signed file URL handed out by the gateway
	// (an output file of a replica) can be used. Zero means
	// DefaultFileURLTTL; negative: for ever.
	FileURLTTL time.Duration
	// PublicURL is the gateway's URL as callers reach it
	// ("https://gw.example.com"): the root /config announces and file URLs
	// start with, whatever the Host header says. Empty: the Host header
	// when it is ListenAddr or a loopback name, else ListenAddr.
	// TrustForwarded wins over it.
	PublicURL string
	// ListenAddr is the gateway's listen address (host:port), for the
	// Host check when PublicURL is not set.
	ListenAddr string
	// ForwardCallerToken sends the caller's own Hugging Face token (and
	// X-IP-Token) to the replicas instead of the gateway's HF_TOKEN: taken
	// from X-HF-Authorization, or from Authorization when CallerAuthIsKey
	// is false.
	ForwardCallerToken bool
	// ShowReplicaErrors passes the replicas' own error answers (a Python
	// traceback, a proxy's page) and the pool's error texts (they name
	// the replicas by URL) on to callers. Default false: callers get
	// Gradio's {"detail": ...} with the gateway's own message, and the
	// details go to the log.
	ShowReplicaErrors bool
	// CallerAuthIsKey says that Authorization carries the gateway's API
	// key (GRADIOPOOL_API_KEYS is set), not an HF token.
	CallerAuthIsKey bool
	// HashKey keys the signatures of file URLs, the session owner hash and
	// the user hash of logs. Empty means random per process (file URLs
	// then do not survive a restart).
	HashKey []byte
	// HashUser returns the loggable hash of a user (an e-mail). Nil means
	// the first 8 hex digits of HMAC-SHA256(HashKey, user).
	HashUser func(string) string
	// PinSessions sends every call of a caller session to the session's
	// replica. Default false: a call to an endpoint that keeps no session
	// state (see [FrontDoor.Spreadable]) goes to the replica the pool's
	// rule picks for it, like the /v1 calls.
	PinSessions bool
	// PinnedEndpoints names endpoints (api names, with or without "/", or
	// "#N" for fn_index N) whose calls always go to the session's replica:
	// for apps that keep server state keyed on the session hash outside
	// gr.State.
	PinnedEndpoints []string
	// Store keeps the caller-session mapping. Nil means a new
	// [MemoryStore].
	Store Store
	// OnForeignEnd, if set, is told about calls that ended on a stream this
	// instance relayed while another instance holds their slots (the
	// caller's join reached another gateway of a cluster sharing Store):
	// eventID is the call, or "" when every call of the session ended (the
	// stream closed). The other instance must then call [FrontDoor.Ended].
	// Nil: calls are assumed joined here.
	OnForeignEnd func(front, eventID string)
	// OnCall, if set, is told about every front-door call that ended:
	// accepted calls when their process_completed passes (or they are
	// lost), joins that no replica took. It must be quick (metrics).
	OnCall func(CallEnd)
	// Annotate, if set, adds fields to the access line of r (the user's
	// hash, the replica, the endpoint, an error code). Nil: none.
	Annotate func(r *http.Request, attrs ...slog.Attr)
	// Logger receives session events. Nil means no logging.
	Logger *slog.Logger
	// Now is the clock (tests inject one). Nil means time.Now.
	Now func() time.Time
}

// CallEnd is one front-door call that ended (Config.OnCall).
type CallEnd struct {
	Replica  string        // "" when no replica took the call
	Endpoint string        // "fn_index=N", as the caller's join named it
	User     string        // the user's loggable hash (Config.HashUser); "" anonymous
	Wait     time.Duration // from the join's arrival to a slot
	Duration time.Duration // from the join's arrival to the end
	// Code is "" for a completed call, CodeAppError when the app answered
	// with an error (process_completed with success false: gr.Error), else
	// why the call failed: CodeNoReplica, CodeRefused, CodeReplicaLost,
	// CodeBadInput, CodeClientClosed, CodeExpired, CodeShutdown, CodeNotRead.
	Code string
}

// CallEnd codes.
const (
	CodeAppError     = "app_error"
	CodeNoReplica    = "no_replica"    // no replica could take the join
	CodeRefused      = "refused"       // every replica tried refused the join
	CodeReplicaLost  = "replica_lost"  // accepted (or maybe), then the replica was lost
	CodeBadInput     = "bad_arguments" // the app refused the join's input
	CodeClientClosed = "client_closed" // the caller's stream went away with the call in flight
	CodeExpired      = "expired"       // the session expired with the call in flight
	CodeShutdown     = "shutdown"      // the front door closed with the call in flight
	CodeNotRead      = "not_read"      // no data stream was opened within ReadGrace: cancelled
	// codeElsewhere: the call's end was relayed by another gateway, which
	// knows how it ended; not reported here.
	codeElsewhere = "-"
)

// annotate adds attrs to r's access line (Config.Annotate).
func (f *FrontDoor) annotate(r *http.Request, attrs ...slog.Attr) {
	if f.cfg.Annotate != nil {
		f.cfg.Annotate(r, attrs...)
	}
}

// reportCall tells Config.OnCall about a call that ended with code.
func (f *FrontDoor) reportCall(m callMeta, code string) {
	if m.release != nil {
		m.release()
	}
	if f.cfg.OnCall == nil || code == codeElsewhere {
		return
	}
	f.cfg.OnCall(CallEnd{Replica: m.replica, Endpoint: m.endpoint, User: m.user, Wait: m.wait,
		Duration: f.cfg.Now().Sub(m.start), Code: code})
}

// Route is one HTTP route of the front door. Open routes need no API key
// (signed file downloads; Gradio's own open routes).
type Route struct {
	Pattern string
	Handler http.HandlerFunc
	Open    bool
}

// FrontDoor serves the Gradio protocol over a pool. It is safe for
// concurrent use.
type FrontDoor struct {
	p     *pool.Pool
	cfg   Config
	log   *slog.Logger
	store Store
	// fileIDs numbers the replicas in file URLs (the index is signed into
	// each URL): append-only, so that a URL handed out stays valid when a
	// reload changes the pool's replicas (see replicaIndex).
	fileMu  sync.Mutex
	fileIDs []string
	appID   uint64
	ups     *uploads

	mu        sync.Mutex // guards sessions and perClient; nothing slow runs under it
	sessions  map[string]*callerSession
	perClient map[string]int // Config.ClientID -> its sessions

	hostWarn sync.Once // the Host check's warning is logged once

	refMu sync.Mutex // guards ref
	ref   refConfig
	fps   fingerprints

	stats counters

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	startOnce sync.Once
	drain     chan struct{} // closed by Drain
	drainOnce sync.Once
	// stopCalls ends at StopCalls (a drain's time-out): the streams of
	// calls in flight end with an error message of their own.
	stopCalls     context.Context
	stopCallsDone context.CancelFunc
}

type counters struct {
	created, expired, moved, stateLost, lost, joins, refused, callerFaults, notRead, sessionsRefused atomic.Uint64
}

// New returns the front door of p. From its first session on it runs a
// sweeper (sessions, uploads) that Close stops.
func New(p *pool.Pool, cfg Config) (*FrontDoor, error) {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.UploadTTL <= 0 {
		cfg.UploadTTL = DefaultUploadTTL
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = gradio.DefaultHeartbeatInterval
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxFilesPerUpload == 0 {
		cfg.MaxFilesPerUpload = DefaultMaxFilesPerUpload
	}
	if cfg.MaxUploadBytesPerClient == 0 {
		cfg.MaxUploadBytesPerClient = DefaultMaxUploadBytesPerClient
	}
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if cfg.FileURLTTL == 0 {
		cfg.FileURLTTL = DefaultFileURLTTL
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.MaxSessionsPerClient == 0 {
		cfg.MaxSessionsPerClient = DefaultMaxSessionsPerClient
	}
	if cfg.ReadGrace == 0 {
		cfg.ReadGrace = DefaultReadGrace
	}
	if len(cfg.HashKey) == 0 {
		cfg.HashKey = make([]byte, 32)
		_, _ = rand.Read(cfg.HashKey)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HashUser == nil {
		cfg.HashUser = pool.NewUserHasher(cfg.HashKey).Tag
	}
	f := &FrontDoor{p: p, cfg: cfg, log: cfg.Logger, store: cfg.Store, sessions: map[string]*callerSession{}, perClient: map[string]int{}}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.store == nil {
		f.store = NewMemoryStore(cfg.Now)
	}
	if p != nil {
		f.fileIDs = p.Replicas()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	f.appID = binary.BigEndian.Uint64(b[:]) | 1<<63 // above 2^63 like the simulator: exercises uint64
	f.ups = newUploads(cfg.UploadDir, cfg.Now, cfg.MaxUploadBytesPerClient, cfg.MaxUploadBytes)
	f.fps.init()
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.drain = make(chan struct{})
	f.stopCalls, f.stopCallsDone = context.WithCancel(context.Background())
	return f, nil
}

// start runs the sweeper from the first session on, so that a gateway
// whose front door is never used runs nothing for it.
func (f *FrontDoor) start() {
	f.startOnce.Do(func() {
		if f.ctx.Err() != nil {
			return
		}
		f.wg.Add(1)
		go f.sweepLoop()
	})
}

// Drain ends the heartbeat streams (a gateway that drains must not wait
// for them: clients keep them open for ever) and answers new joins 503
// in Gradio's shape (drainingDetail). Calls in flight go on: the gateway
// waits for them (CallsInFlight), then StopCalls ends those left.
func (f *FrontDoor) Drain() { f.drainOnce.Do(func() { close(f.drain) }) }

// drainingDetail is what a join gets while the gateway drains.
const drainingDetail = "gradiopool: the gateway is restarting (draining); retry in a moment"

// stoppedDetail is the error of a call in flight that StopCalls ended.
const stoppedDetail = "gradiopool: the gateway is restarting and stopped this call before it finished (drain_timeout); it is not run again, retry it"

// StopCalls ends every call in flight: its caller's stream gets
// process_completed with success false and stoppedDetail, then
// close_stream, and the replica's stream is closed (Gradio cancels the
// session's calls). For a gateway's drain time-out; it returns at once.
func (f *FrontDoor) StopCalls() { f.stopCallsDone() }

// CallsInFlight is how many calls hold a slot now (joined, not completed):
// what a draining gateway waits for.
func (f *FrontDoor) CallsInFlight() int {
	f.mu.Lock()
	list := make([]*callerSession, 0, len(f.sessions))
	for _, s := range f.sessions {
		list = append(list, s)
	}
	f.mu.Unlock()
	n := 0
	for _, s := range list {
		s.mu.Lock()
		n += len(s.pending)
		s.mu.Unlock()
	}
	return n
}

// Close stops the sweeper, ends every session (releasing the slots of
// their calls in flight) and removes the uploads it kept.
func (f *FrontDoor) Close() error {
	f.cancel()
	f.startOnce.Do(func() {})     // no sweeper after Close
	f.fps.checkOnce.Do(func() {}) // nor a replica check
	f.wg.Wait()
	f.mu.Lock()
	all := f.sessions
	f.sessions = map[string]*callerSession{}
	f.perClient = map[string]int{}
	f.mu.Unlock()
	for _, s := range all {
		s.releaseAll(CodeShutdown)
	}
	return f.ups.close()
}

// Routes lists the front door's routes, each under /gradio_api (Gradio 5/6)
// and without the prefix (Gradio 4.44), plus /config.
func (f *FrontDoor) Routes() []Route {
	rs := []Route{
		{Pattern: "GET /config", Handler: f.handleConfig},
		{Pattern: "GET /config/{$}", Handler: f.handleConfig},
	}
	for _, p := range []string{"/gradio_api", ""} {
		rs = append(rs,
			Route{Pattern: "GET " + p + "/info", Handler: f.handleInfo},
			Route{Pattern: "GET " + p + "/app_id", Handler: f.handleAppID, Open: true},
			Route{Pattern: "POST " + p + "/queue/join", Handler: f.handleJoin},
			Route{Pattern: "GET " + p + "/queue/data", Handler: f.handleData},
			Route{Pattern: "GET " + p + "/heartbeat/{session_hash}", Handler: f.handleHeartbeat},
			Route{Pattern: "POST " + p + "/cancel", Handler: f.handleCancel},
			Route{Pattern: "POST " + p + "/reset", Handler: f.handleReset},
			Route{Pattern: "POST " + p + "/upload", Handler: f.handleUpload},
			// Downloads are capability URLs (signed): no API key, like
			// Gradio's file routes reached from an <img> tag.
			Route{Pattern: "GET " + p + "/file=/{path...}", Handler: f.handleFile, Open: true},
			Route{Pattern: "HEAD " + p + "/file=/{path...}", Handler: f.handleFile, Open: true},
			Route{Pattern: "GET " + p + "/file/{path...}", Handler: f.handleFile, Open: true},
		)
	}
	return rs
}

// Stats are the front door's numbers for pool-stats and metrics.
type Stats struct {
	// Open is the caller sessions known now; Pinned counts them per
	// replica (bound by a first join).
	Open   int            `json:"openSessions"`
	Pinned map[string]int `json:"pinnedSessions"`
	// InFlight is the calls holding a slot now.
	InFlight int `json:"callsInFlight"`
	// Cumulative since start.
	Created uint64 `json:"sessionsCreated"`
	Expired uint64 `json:"sessionsExpired"`
	Joins   uint64 `json:"joins"`
	Refused uint64 `json:"joinsRefused"`
	// CallerFaults counts joins the app refused for the caller's input
	// (answered 4xx, never retried, never counted against a replica).
	CallerFaults uint64 `json:"joinsRefusedInput"`
	Moved        uint64 `json:"sessionsMoved"`
	StateLost    uint64 `json:"stateLost"`
	Lost         uint64 `json:"callsLost"`
	// NotRead counts calls cancelled because no data stream was opened
	// for them within Config.ReadGrace.
	NotRead uint64 `json:"callsNotRead"`
	// SessionsRefused counts new sessions refused by MaxSessions or
	// MaxSessionsPerClient.
	SessionsRefused uint64 `json:"sessionsRefused"`
	Uploads         int    `json:"uploadsKept"`
	UploadBytes     int64  `json:"uploadBytesKept"`
	// Mismatched maps each replica whose app differs from the reference
	// replica's (it gets no front-door session) to how it differs.
	Mismatched map[string]string `json:"configMismatch,omitempty"`
}

// Stats returns a snapshot.
func (f *FrontDoor) Stats() Stats {
	st := Stats{Pinned: map[string]int{}}
	for _, n := range f.replicaNames() {
		st.Pinned[n] = 0
	}
	f.mu.Lock()
	list := make([]*callerSession, 0, len(f.sessions))
	for _, s := range f.sessions {
		list = append(list, s)
	}
	f.mu.Unlock()
	st.Open = len(list)
	for _, s := range list {
		s.mu.Lock()
		if s.bind.Replica != "" {
			st.Pinned[s.bind.Replica]++
		}
		st.InFlight += len(s.pending)
		s.mu.Unlock()
	}
	st.Created = f.stats.created.Load()
	st.Expired = f.stats.expired.Load()
	st.Joins = f.stats.joins.Load()
	st.Refused = f.stats.refused.Load()
	st.CallerFaults = f.stats.callerFaults.Load()
	st.Moved = f.stats.moved.Load()
	st.StateLost = f.stats.stateLost.Load()
	st.Lost = f.stats.lost.Load()
	st.NotRead = f.stats.notRead.Load()
	st.SessionsRefused = f.stats.sessionsRefused.Load()
	st.Uploads = f.ups.count()
	st.UploadBytes = f.ups.bytes()
	for n, me := range f.mismatched() {
		if st.Mismatched == nil {
			st.Mismatched = map[string]string{}
		}
		st.Mismatched[n] = me.Error()
	}
	return st
}

// sweepLoop expires sessions and uploads.
func (f *FrontDoor) sweepLoop() {
	defer f.wg.Done()
	every := min(max(f.cfg.SessionTTL/4, time.Second), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
			f.sweep()
		}
	}
}

// sweep expires the sessions idle for SessionTTL with no stream open, and
// the uploads older than UploadTTL.
func (f *FrontDoor) sweep() {
	now := f.cfg.Now()
	var dead []*callerSession
	f.mu.Lock()
	for k, s := range f.sessions {
		s.mu.Lock()
		idle := s.streams == 0 && now.Sub(s.lastSeen) >= f.cfg.SessionTTL
		s.mu.Unlock()
		if idle {
			f.forgetLocked(k, s)
			dead = append(dead, s)
		}
	}
	f.mu.Unlock()
	for _, s := range dead {
		n := s.releaseAll(CodeExpired)
		ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
		_ = f.store.Delete(ctx, s.front)
		cancel()
		f.stats.expired.Add(1)
		f.log.Debug("front door: session expired", slog.String("session", shortHash(s.front)), slog.Int("calls_released", n))
	}
	f.ups.sweep(now.Add(-f.cfg.UploadTTL))
}

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
	m := hmac.New(sha256.New, f.cfg.HashKey)
	m.Write([]byte("owner\x00" + v))
	return hex.EncodeToString(m.Sum(nil)[:12])
}

// clientID names r's client for the session limits (Config.ClientID).
func (f *FrontDoor) clientID(r *http.Request) string {
	if f.cfg.ClientID != nil {
		return f.cfg.ClientID(r)
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
func newBackendHash() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "gp" + hex.EncodeToString(b[:])
}

// callerHeaders copies what the caller may send to the replica: its own
// token and X-IP-Token when ForwardCallerToken is set.
func (f *FrontDoor) callerHeaders(r *http.Request, out http.Header) {
	if !f.cfg.ForwardCallerToken {
		return
	}
	tok := r.Header.Get("X-HF-Authorization")
	if tok == "" && !f.cfg.CallerAuthIsKey {
		tok = r.Header.Get("Authorization")
	}
	if tok != "" {
		out.Set("Authorization", tok)
	}
	if ip := r.Header.Get("X-IP-Token"); ip != "" {
		out.Set("X-IP-Token", ip)
	}
}

// appFor returns the app of a replica, or an error for the caller.
func (f *FrontDoor) appFor(ctx context.Context, replica string) (*gradio.Client, error) {
	return f.p.App(ctx, replica)
}

// replicaNames are the pool's replicas now, in pool order.
func (f *FrontDoor) replicaNames() []string {
	if f.p == nil {
		return nil
	}
	return f.p.Replicas()
}

// replicaIndex is name's number in file URLs, given to it now if it has
// none (a replica added by a reload). Names come from the pool, so the
// list is bounded by the replicas ever configured.
func (f *FrontDoor) replicaIndex(name string) int {
	f.fileMu.Lock()
	defer f.fileMu.Unlock()
	if i := slices.Index(f.fileIDs, name); i >= 0 {
		return i
	}
	f.fileIDs = append(f.fileIDs, name)
	return len(f.fileIDs) - 1
}

// replicaAt is the replica numbered idx in file URLs.
func (f *FrontDoor) replicaAt(idx int) (string, bool) {
	f.fileMu.Lock()
	defer f.fileMu.Unlock()
	if idx < 0 || idx >= len(f.fileIDs) {
		return "", false
	}
	return f.fileIDs[idx], true
}

// foreignEnd reports a call (or, eventID "", every call) of front that
// ended on this instance's stream to the instance that holds its slot.
func (f *FrontDoor) foreignEnd(front, eventID string) {
	if f.cfg.OnForeignEnd != nil {
		f.cfg.OnForeignEnd(front, eventID)
	}
}

// Ended releases the slot of a call of caller session front that ended on
// another instance's stream (see Config.OnForeignEnd); eventID "" releases
// every call of the session. Unknown sessions and calls are ignored.
func (f *FrontDoor) Ended(front, eventID string) {
	f.mu.Lock()
	s := f.sessions[front]
	f.mu.Unlock()
	if s == nil {
		return
	}
	if eventID == "" {
		s.releaseAll(codeElsewhere)
		return
	}
	s.complete(eventID, codeElsewhere)
}
