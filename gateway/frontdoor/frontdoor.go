package frontdoor

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/appshape"
	"github.com/gradiopool/gradiopool/internal/uploadstore"
	"github.com/gradiopool/gradiopool/pool"
)

// annotate adds attrs to r's access line (Config.Annotate).
func (f *FrontDoor) annotate(r *http.Request, attrs ...slog.Attr) {
	if f.conf().Annotate != nil {
		f.conf().Annotate(r, attrs...)
	}
}

// reportCall tells Config.OnCall about a call that ended with code.
func (f *FrontDoor) reportCall(c *call, code string) {
	if c.release != nil {
		c.release()
	}
	if f.conf().OnCall == nil {
		return
	}
	f.conf().OnCall(CallEnd{Replica: c.replica, Endpoint: c.endpoint, User: c.user, Wait: c.wait,
		Duration: f.conf().Now().Sub(c.start), Code: code})
}

// Route is one HTTP route of the front door. Open routes need no API key
// (signed file downloads; Gradio's own open routes).
type Route struct {
	Pattern string
	Handler http.HandlerFunc
	Open    bool
	// Session is where the route's requests name their caller session
	// ([SessionHash] reads it): in a cluster they are served by the
	// gateway that owns the session. Binds: a request that binds an
	// unowned session (its first queue/join).
	Session SessionPlace
	Binds   bool
}

// SessionPlace is where a request names its caller session.
type SessionPlace int

const (
	NoSession      SessionPlace = iota
	sessionInBody               // the JSON body's session_hash (join, cancel, reset)
	sessionInQuery              // ?session_hash= (queue/data)
	sessionInPath               // /heartbeat/{session_hash}
)

// SessionHash returns the caller session r names at place ("" none or
// malformed). A body is read (at most maxBody bytes) and put back for the
// handler.
func SessionHash(r *http.Request, place SessionPlace, maxBody int64) string {
	var h string
	switch place {
	case sessionInQuery:
		h = r.URL.Query().Get("session_hash")
	case sessionInPath:
		h = r.PathValue("session_hash")
	case sessionInBody:
		if maxBody <= 0 {
			maxBody = DefaultMaxBodyBytes
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil || int64(len(b)) > maxBody {
			// The handler answers it, reading what is left after b.
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), r.Body))
			return ""
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		var m struct {
			SessionHash string `json:"session_hash"`
		}
		_ = json.Unmarshal(b, &m)
		h = m.SessionHash
	}
	if !validHash(h) {
		return ""
	}
	return h
}

// Pool is what the front door needs of the gateway's pool (a
// *pool.Pool): its replicas, their apps, and a slot on one of them. The
// front door keeps each call's slot from its join to its end.
type Pool interface {
	// Replicas are the replicas' names, in pool order.
	Replicas() []string
	// App returns a replica's app, connecting it first if need be.
	App(ctx context.Context, replica string) (*gradio.Client, error)
	// ConnectedApp returns a connected replica's app, nil otherwise; it
	// never waits.
	ConnectedApp(replica string) *gradio.Client
	// Reserve waits (at most QueueTimeout) for a slot of a replica.
	Reserve(ctx context.Context, user string, opts pool.ReserveOptions) (*pool.Slot, error)
	QueueTimeout() time.Duration
	// UserTag is the keyed hash a user is logged and counted as.
	UserTag(user string) string
}

// FrontDoor serves the Gradio protocol over a pool. It is safe for
// concurrent use.
type FrontDoor struct {
	p Pool
	// cfg is the configuration in effect: Reconfigure swaps in a copy
	// with new live settings (conf reads it).
	cfg atomic.Pointer[Config]
	log *slog.Logger
	// fileIDs numbers the replicas in file URLs (the index is signed into
	// each URL): append-only, so that a URL handed out stays valid when a
	// reload changes the pool's replicas (see replicaIndex).
	fileMu  sync.Mutex
	fileIDs []string
	appID   uint64
	ups     *uploadstore.Store

	mu        sync.Mutex // guards sessions and perClient; nothing slow runs under it
	sessions  map[string]*callerSession
	perClient map[string]int // Config.ClientID -> its sessions

	hostWarn sync.Once // the Host check's warning is logged once

	refMu sync.Mutex // guards ref
	ref   refConfig
	fps   fingerprints
	ids   appshape.IDMaps // presented component ids -> each replica's (appshape.IDMaps)

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
	qwg           sync.WaitGroup // the goroutines of calls in the gateway's queue (queued.go)
	refWait       refWaiters     // the joins waiting for the first replica (refwait.go)
}

type counters struct {
	created, expired, moved, stateLost, lost, joins, refused, callerFaults, notRead, sessionsRefused, queued atomic.Uint64
}

// New returns the front door of p. From its first session on it runs a
// sweeper (sessions, uploads) that Close stops.
func New(p Pool, cfg Config) (*FrontDoor, error) {
	cfg.limitDefaults()
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = gradio.DefaultHeartbeatInterval
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	cfg.QueueUpdateInterval = cmp.Or(cfg.QueueUpdateInterval, defaultQueueUpdateInterval)
	if len(cfg.HashKey) == 0 {
		cfg.HashKey = make([]byte, 32)
		_, _ = rand.Read(cfg.HashKey)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HashUser == nil && p != nil {
		cfg.HashUser = p.UserTag
	}
	if cfg.HashUser == nil {
		cfg.HashUser = func(string) string { return "" } // no pool: no call is served, no user logged
	}
	f := &FrontDoor{p: p, log: cfg.Logger, sessions: map[string]*callerSession{}, perClient: map[string]int{}}
	f.cfg.Store(&cfg)
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if p != nil {
		f.fileIDs = p.Replicas()
	}
	f.appID = cfg.AppID
	if f.appID == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		f.appID = binary.BigEndian.Uint64(b[:]) | 1<<63 // above 2^63 like the simulator: exercises uint64
	}
	f.ups = uploadstore.New(cfg.UploadDir, uploadPrefix(cfg.UploadHome), cfg.Now, cfg.MaxUploadBytesPerClient, cfg.MaxUploadBytes)
	f.fps.init()
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.drain = make(chan struct{})
	f.stopCalls, f.stopCallsDone = context.WithCancel(context.Background())
	return f, nil
}

// limitDefaults applies the defaults of the settings Reconfigure may
// change: zero is the default; a negative bound means none (see Config).
func (c *Config) limitDefaults() {
	if c.SessionTTL <= 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.UploadTTL <= 0 {
		c.UploadTTL = DefaultUploadTTL
	}
	c.MaxFilesPerUpload = cmp.Or(c.MaxFilesPerUpload, DefaultMaxFilesPerUpload)
	c.MaxUploadBytesPerClient = cmp.Or(c.MaxUploadBytesPerClient, DefaultMaxUploadBytesPerClient)
	c.MaxUploadBytes = cmp.Or(c.MaxUploadBytes, DefaultMaxUploadBytes)
	c.FileURLTTL = cmp.Or(c.FileURLTTL, DefaultFileURLTTL)
	c.MaxSessions = cmp.Or(c.MaxSessions, DefaultMaxSessions)
	c.MaxSessionsPerClient = cmp.Or(c.MaxSessionsPerClient, DefaultMaxSessionsPerClient)
	c.ReadGrace = cmp.Or(c.ReadGrace, DefaultReadGrace)
}

// conf is the configuration in effect.
func (f *FrontDoor) conf() *Config { return f.cfg.Load() }

// Reconfigure applies, while calls run, the settings of live that can
// change safely: the session, upload and file-URL bounds and time-outs,
// read grace, pinning and whether replica errors are shown. Calls and
// sessions in flight keep what they hold; new ones follow the new values.
// The other fields of live are ignored.
func (f *FrontDoor) Reconfigure(live Config) {
	next := *f.conf()
	next.SessionTTL, next.UploadTTL, next.FileURLTTL, next.ReadGrace = live.SessionTTL, live.UploadTTL, live.FileURLTTL, live.ReadGrace
	next.MaxSessions, next.MaxSessionsPerClient = live.MaxSessions, live.MaxSessionsPerClient
	next.MaxFileBytes, next.MaxFilesPerUpload = live.MaxFileBytes, live.MaxFilesPerUpload
	next.MaxUploadBytesPerClient, next.MaxUploadBytes = live.MaxUploadBytesPerClient, live.MaxUploadBytes
	next.ShowReplicaErrors, next.PinSessions, next.PinnedEndpoints = live.ShowReplicaErrors, live.PinSessions, slices.Clone(live.PinnedEndpoints)
	next.limitDefaults()
	f.cfg.Store(&next)
	f.ups.SetQuotas(next.MaxUploadBytesPerClient, next.MaxUploadBytes)
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
	n := 0
	for _, s := range f.sessionList() {
		s.mu.Lock()
		n += len(s.calls)
		for _, c := range s.queued {
			if c.state < callAccepted {
				n++ // waits in the gateway's queue
			}
		}
		s.mu.Unlock()
	}
	return n
}

// sessionList is a snapshot of the sessions known now.
func (f *FrontDoor) sessionList() []*callerSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.sessions))
}

// Close stops the sweeper, ends every session (releasing the slots of
// their calls in flight) and removes the uploads it kept.
func (f *FrontDoor) Close() error {
	f.cancel()
	f.startOnce.Do(func() {})     // no sweeper after Close
	f.fps.checkOnce.Do(func() {}) // nor a replica check
	f.wg.Wait()
	f.qwg.Wait() // their waits ended with f.ctx
	f.mu.Lock()
	all := f.sessions
	f.sessions = map[string]*callerSession{}
	f.perClient = map[string]int{}
	f.mu.Unlock()
	for _, s := range all {
		s.releaseAll(codeShutdown)
	}
	return f.ups.Close()
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
			Route{Pattern: "POST " + p + "/queue/join", Handler: f.handleJoin, Session: sessionInBody, Binds: true},
			Route{Pattern: "GET " + p + "/queue/data", Handler: f.handleData, Session: sessionInQuery},
			Route{Pattern: "GET " + p + "/heartbeat/{session_hash}", Handler: f.handleHeartbeat, Session: sessionInPath},
			Route{Pattern: "POST " + p + "/cancel", Handler: f.handleCancel, Session: sessionInBody},
			Route{Pattern: "POST " + p + "/reset", Handler: f.handleReset, Session: sessionInBody},
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

// sweepLoop expires sessions and uploads.
func (f *FrontDoor) sweepLoop() {
	defer f.wg.Done()
	every := min(max(f.conf().SessionTTL/4, time.Second), time.Minute)
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

// statelessSessionTTL is how long a session that holds no gr.State (no
// call of it ran on its replica) is kept without a stream: a session a
// client made and never used must not count for an hour.
const statelessSessionTTL = 2 * time.Minute

// sweep expires the sessions idle for SessionTTL with no stream open (those
// holding no state after statelessSessionTTL), and the uploads older than
// UploadTTL.
func (f *FrontDoor) sweep() {
	now := f.conf().Now()
	var dead []*callerSession
	f.mu.Lock()
	for k, s := range f.sessions {
		s.mu.Lock()
		quiet := now.Sub(s.lastSeen)
		idle := s.streams == 0 && (quiet >= f.conf().SessionTTL ||
			// No state to keep: no call ran on its replica, none runs.
			s.accepted == 0 && len(s.calls) == 0 && len(s.queued) == 0 && quiet >= min(f.conf().SessionTTL, statelessSessionTTL))
		s.mu.Unlock()
		if idle {
			f.forgetLocked(k, s)
			dead = append(dead, s)
		}
	}
	f.mu.Unlock()
	for _, s := range dead {
		n := s.releaseAll(codeExpired)
		f.stats.expired.Add(1)
		f.log.Debug("front door: session expired", slog.String("session", shortHash(s.front)), slog.Int("calls_released", n))
	}
	f.ups.Sweep(now.Add(-f.conf().UploadTTL))
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
