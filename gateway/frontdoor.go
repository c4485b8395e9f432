package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gradiopool/gradiopool/gateway/frontdoor"
	"github.com/gradiopool/gradiopool/pool"
)

// FrontDoorConfig configures the Gradio front door: the gateway serving the
// Gradio app protocol of its replicas at / (see package frontdoor).
type FrontDoorConfig struct {
	// Disabled turns the front door off (its routes answer 404). Default
	// false: on whenever the backend is a pool.
	Disabled bool
	// SessionTTL is how long a caller's session (and its replica and gr.State
	// there) is kept after its last request when it has no stream open.
	// Zero means frontdoor.DefaultSessionTTL (1 h).
	SessionTTL time.Duration
	// UploadDir keeps uploads until the join that uses them. Empty means a
	// temporary directory removed at exit.
	UploadDir string
	// TrustForwardedHeaders makes the announced root URL honour
	// X-Forwarded-Proto/X-Forwarded-Host. Default false.
	TrustForwardedHeaders bool
	// ForwardCallerToken sends the caller's own HF token (X-HF-Authorization,
	// or Authorization when no API keys are set) and X-IP-Token to the
	// Spaces instead of HF_TOKEN. Default false: never forwarded.
	ForwardCallerToken bool
	// ShowReplicaErrors passes the replicas' own error answers (Python
	// tracebacks) and replica names in error texts on to front-door
	// callers. Default false: they go to the log only.
	ShowReplicaErrors bool
	// ReadGrace is how long an accepted call waits for its caller's
	// queue/data stream before it is cancelled and its slot freed. Zero
	// means frontdoor.DefaultReadGrace (5 s); negative: never.
	ReadGrace time.Duration
	// MaxSessions and MaxSessionsPerClient bound the caller sessions kept,
	// in total (past it 503) and per client: its API key, else its address
	// (past it 429). Zero means frontdoor's defaults; negative: no limit.
	MaxSessions          int
	MaxSessionsPerClient int
	// Upload bounds (see frontdoor.Config): bytes per file (0: the app's
	// max_file_size, else max_body_bytes), parts per request, bytes on disk
	// per client and in total, and how long an upload is kept. Zero means
	// frontdoor's defaults; negative: no limit.
	MaxFileBytes            int64
	MaxFilesPerUpload       int
	MaxUploadBytesPerClient int64
	MaxUploadBytes          int64
	UploadTTL               time.Duration
	// PublicURL is the gateway's URL as callers reach it: the root
	// /config announces. Empty: the Host header when it is the listen
	// address or a loopback name, else the listen address.
	PublicURL string
	// FileURLTTL is how long a signed file URL can be used. Zero means
	// frontdoor.DefaultFileURLTTL (1 h); negative: for ever.
	FileURLTTL time.Duration
	// PinSessions runs every call of a front-door caller session on the
	// session's replica. Default false: a call to an endpoint without
	// gr.State runs on the replica the pool's rule picks for it
	// (frontdoor.Config.PinSessions).
	PinSessions bool
	// PinnedEndpoints names endpoints (api names, or "#N" for fn_index N)
	// whose calls always run on the session's replica.
	PinnedEndpoints []string
}

// Pool returns the pool behind the backend (the front door needs it).
func (b *poolBackend) Pool() *pool.Pool { return b.p }

// mountFrontDoor adds the Gradio front door's routes when the backend is a
// pool and the front door is not disabled.
func (g *Gateway) mountFrontDoor(api, open func(pattern string, h http.HandlerFunc)) {
	p := g.backend.Pool()
	if p == nil || g.cfg.FrontDoor.Disabled {
		return
	}
	// The settings a reload may change (frontDoorLive), then the others.
	fc := frontDoorLive(g.cfg)
	fc.UploadDir = g.cfg.FrontDoor.UploadDir
	fc.TrustForwarded = g.cfg.FrontDoor.TrustForwardedHeaders
	fc.ForwardCallerToken = g.cfg.FrontDoor.ForwardCallerToken
	fc.CallerAuthIsKey = len(g.cfg.Secrets.APIKeys) > 0
	fc.MaxBodyBytes = g.cfg.MaxBodyBytes
	fc.ClientID = g.clientID
	fc.PublicURL = g.cfg.FrontDoor.PublicURL
	fc.ListenAddr = g.cfg.Listen
	fc.BeginCall = func(r *http.Request) (func(), bool) {
		release, code := g.beginCalls(r)
		return release, code == ""
	}
	fc.HashKey = []byte(g.cfg.Secrets.HashKey) // empty: random per process
	fc.AppID = g.clusterAppID()
	fc.HashUser = g.backend.UserTag
	fc.Logger = g.log
	fc.Annotate = addLog
	fc.OnCall = func(c frontdoor.CallEnd) {
		g.metrics.observeCall(CallRecord{Route: routeFrontDoor, Replica: c.Replica, Endpoint: c.Endpoint,
			Wait: c.Wait, Total: c.Duration, Code: c.Code})
	}
	fc.UploadHome = g.uploadHome()
	fc.FetchUpload = g.fetchUpload()
	fd, err := frontdoor.New(p, fc)
	if err != nil {
		g.log.Error("front door disabled", "error", err)
		return
	}
	g.front = fd
	o := g.owners()
	for _, rt := range fd.Routes() {
		h := rt.Handler
		if strings.HasPrefix(rt.Pattern, "POST ") && strings.HasSuffix(rt.Pattern, "/cancel") {
			h = g.calls.Cancel(h) // cancels /gradio_api/call calls too (they name no session)
		}
		if o != nil && rt.Session != frontdoor.NoSession {
			h = o.route(gradioDoor, func(r *http.Request) (string, bool) {
				if hash := frontdoor.SessionHash(r, rt.Session, g.cfg.MaxBodyBytes); hash != "" {
					return "fd:" + hash, rt.Binds
				}
				return "", false
			}, h)
		}
		if rt.Open {
			open(rt.Pattern, frontDoorRoute(h))
		} else {
			api(rt.Pattern, frontDoorRoute(h))
		}
	}
	if o != nil {
		open("GET "+peerUploadPath+"{id}", o.handlePeerUpload(fd))
	}
	g.metrics.register(&frontDoorCollector{fd: fd})
}

// frontDoorLive is the part of the front door's configuration a reload
// may change (frontdoor.FrontDoor.Reconfigure): the keys marked live.
func frontDoorLive(c Config) frontdoor.Config {
	fd := c.FrontDoor
	return frontdoor.Config{
		SessionTTL: fd.SessionTTL, ReadGrace: fd.ReadGrace, UploadTTL: fd.UploadTTL, FileURLTTL: fd.FileURLTTL,
		MaxSessions: fd.MaxSessions, MaxSessionsPerClient: fd.MaxSessionsPerClient,
		MaxFileBytes: fd.MaxFileBytes, MaxFilesPerUpload: fd.MaxFilesPerUpload,
		MaxUploadBytesPerClient: fd.MaxUploadBytesPerClient, MaxUploadBytes: fd.MaxUploadBytes,
		ShowReplicaErrors: fd.ShowReplicaErrors, PinSessions: fd.PinSessions, PinnedEndpoints: fd.PinnedEndpoints,
	}
}

// owners is the cluster's owner records and forwarding, nil outside a
// cluster.
func (g *Gateway) owners() *owners {
	if g.member == nil {
		return nil
	}
	return g.member.owners
}

// uploadHome names this gateway in the ids of its front door's uploads,
// in a cluster (frontdoor.Config.UploadHome).
func (g *Gateway) uploadHome() string {
	if o := g.owners(); o != nil {
		return o.id
	}
	return ""
}

// fetchUpload fetches uploads other gateways of the cluster keep
// (frontdoor.Config.FetchUpload).
func (g *Gateway) fetchUpload() func(ctx context.Context, home, id string) (io.ReadCloser, error) {
	if o := g.owners(); o != nil {
		return o.heldUpload
	}
	return nil
}

// frontDoorRoute labels the pool's events of h's calls (failovers) with
// the front door's route.
func frontDoorRoute(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h(w, r.WithContext(pool.WithRoute(r.Context(), routeFrontDoor)))
	}
}

// FrontDoor returns the Gradio front door, nil when off.
func (g *Gateway) FrontDoor() *frontdoor.FrontDoor { return g.front }

// statsDocument is the pool-stats document plus the front door's numbers.
func (g *Gateway) statsDocument(ctx context.Context) any {
	st := g.backend.Stats(ctx)
	if g.front == nil {
		return st
	}
	b, err := json.Marshal(st)
	if err != nil {
		return st
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return st
	}
	m["frontDoor"], _ = json.Marshal(g.front.Stats())
	return m
}

var (
	descFDOpen = prometheus.NewDesc(metricsNamespace+"_frontdoor_sessions",
		"Gradio front-door caller sessions open now.", nil, nil)
	descFDPinned = prometheus.NewDesc(metricsNamespace+"_frontdoor_sessions_pinned",
		"Front-door sessions bound to each replica.", []string{"replica"}, nil)
	descFDInFlight = prometheus.NewDesc(metricsNamespace+"_frontdoor_calls_in_flight",
		"Front-door calls holding a slot of their replica.", nil, nil)
	descFDExpired = prometheus.NewDesc(metricsNamespace+"_frontdoor_sessions_expired_total",
		"Front-door sessions expired (no stream, idle for session_ttl).", nil, nil)
	descFDMoved = prometheus.NewDesc(metricsNamespace+"_frontdoor_sessions_moved_total",
		"Front-door sessions moved to another replica after a refused join.", nil, nil)
	descFDStateLost = prometheus.NewDesc(metricsNamespace+"_frontdoor_state_lost_total",
		"Moves of sessions that had calls on their old replica (their gr.State starts empty).", nil, nil)
	descFDLost = prometheus.NewDesc(metricsNamespace+"_frontdoor_calls_lost_total",
		"Front-door calls accepted by a replica and then lost (reported, never re-run).", nil, nil)
	descFDMismatch = prometheus.NewDesc(metricsNamespace+"_frontdoor_replica_config_mismatch",
		"1 when the replica serves another app than the reference replica (it gets no front-door session), else 0.", []string{"replica"}, nil)
)

type frontDoorCollector struct{ fd *frontdoor.FrontDoor }

func (c *frontDoorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFDOpen, descFDPinned, descFDInFlight, descFDExpired, descFDMoved, descFDStateLost, descFDLost, descFDMismatch} {
		ch <- d
	}
}

func (c *frontDoorCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.fd.Stats()
	ch <- prometheus.MustNewConstMetric(descFDOpen, prometheus.GaugeValue, float64(st.Open))
	ch <- prometheus.MustNewConstMetric(descFDInFlight, prometheus.GaugeValue, float64(st.InFlight))
	for r, n := range st.Pinned {
		ch <- prometheus.MustNewConstMetric(descFDPinned, prometheus.GaugeValue, float64(n), r)
		bad := 0.0
		if _, ok := st.Mismatched[r]; ok {
			bad = 1
		}
		ch <- prometheus.MustNewConstMetric(descFDMismatch, prometheus.GaugeValue, bad, r)
	}
	ch <- prometheus.MustNewConstMetric(descFDExpired, prometheus.CounterValue, float64(st.Expired))
	ch <- prometheus.MustNewConstMetric(descFDMoved, prometheus.CounterValue, float64(st.Moved))
	ch <- prometheus.MustNewConstMetric(descFDStateLost, prometheus.CounterValue, float64(st.StateLost))
	ch <- prometheus.MustNewConstMetric(descFDLost, prometheus.CounterValue, float64(st.Lost))
}
