package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/gradiopool/gradiopool/gateway/frontdoor"
	"github.com/gradiopool/gradiopool/gateway/restcall"
	"github.com/gradiopool/gradiopool/pool"
)

// UserHeader carries the caller's user (an e-mail); absent means anonymous.
// It is the front door's header: one name for /v1, /gradio_api/call and
// the Gradio routes.
const UserHeader = frontdoor.UserHeader

// TimeoutHeader lets a caller give its own deadline for the call, as a Go
// duration ("90s") or seconds ("90"); past it the gateway answers 504.
const TimeoutHeader = "X-Gradiopool-Timeout"

// Gateway is the HTTP gateway over a [Backend]. Create it with [New]; it is
// an http.Handler, and [Gateway.Serve] runs it with graceful draining.
type Gateway struct {
	cfg     Config
	backend Backend
	log     *slog.Logger
	metrics *Metrics
	mux     *http.ServeMux
	unclean http.Handler // answers paths ServeMux would redirect
	now     func() time.Time
	// bodyTimeout bounds reading one request body (defaultBodyReadTimeout).
	bodyTimeout time.Duration
	// headerTimeout bounds reading a request's headers
	// (defaultReadHeaderTimeout); keepAliveTimeout closes idle keep-alive
	// connections (defaultKeepAliveTimeout). Both guard against slowloris and
	// piles of idle connections.
	headerTimeout, keepAliveTimeout time.Duration
	// writeStall cuts a connection whose caller took no byte of a write
	// for that long (defaultWriteStall; guardedConn.Write).
	writeStall time.Duration

	calls *restcall.Calls      // Gradio's REST call API (/gradio_api/call)
	front *frontdoor.FrontDoor // the Gradio front door; nil when off

	// pool and closers are what Open built (nil for New); Close ends them.
	// poolBackend is the backend Open made over pool (nil for New).
	pool        *pool.Pool
	poolBackend *poolBackend
	closers     []func() error
	// member is this gateway's cluster membership when Open made one: the
	// front door then keeps its sessions in Redis.
	member    *clusterMember
	autoscale *autoscaler  // nil unless autoscale.mode is set (autoscale.go)
	history   *History     // the dashboard's last hour (admin_ui.go)
	tracer    trace.Tracer // request spans (tracing.go)

	// jobsCtx is the parent of calls that outlive their request (the
	// /gradio_api/call POST); cancelJobs ends them after a drain.
	jobsCtx    context.Context
	cancelJobs context.CancelCauseFunc
	// jobs counts calls in flight (requests and detached calls), for drain.
	jobs     sync.WaitGroup
	inFlight atomic.Int64
	draining atomic.Bool

	clusterStats func(ctx context.Context) any // nil without a cluster
	logins       revokedLogins                 // admin login cookies logged out
	clientCalls  *clientCalls                  // calls in flight per client
	userCalls    *clientCalls                  // calls in flight per client and user
	trusted      []netip.Prefix                // trusted_proxies
	reload       reloader                      // live reloads (reload.go)
	// secrets are the admin token and API keys in effect: a reload
	// replaces them (reload.go); read them with adminToken and apiKeys.
	secrets atomic.Pointer[liveSecrets]
}

// New returns a gateway serving b with the normalized cfg (replicas are not
// needed here). logger nil means no logging; metrics nil means a new
// [Metrics] on its own registry.
func New(cfg Config, b Backend, logger *slog.Logger, metrics *Metrics) *Gateway {
	return newGateway(cfg, b, logger, metrics, built{})
}

// built is what Open made around the backend: the Gateway owns it.
type built struct {
	pool      *pool.Pool
	backend   *poolBackend // over pool: a reload changes its max
	closers   []func() error
	member    *clusterMember
	autoscale *autoscaler
}

func newGateway(cfg Config, b Backend, logger *slog.Logger, metrics *Metrics, own built) *Gateway {
	cfg.Normalize()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if metrics == nil {
		metrics = NewMetrics(b)
	}
	g := &Gateway{cfg: cfg, backend: b, log: logger, metrics: metrics, now: time.Now, tracer: otel.Tracer(tracerName),
		bodyTimeout: defaultBodyReadTimeout, headerTimeout: defaultReadHeaderTimeout, keepAliveTimeout: defaultKeepAliveTimeout, writeStall: defaultWriteStall,
		pool: own.pool, poolBackend: own.backend, closers: own.closers, member: own.member, autoscale: own.autoscale}
	g.reload.running = cfg
	g.secrets.Store(&liveSecrets{adminToken: cfg.Secrets.AdminToken, apiKeys: cfg.Secrets.APIKeys})
	g.jobsCtx, g.cancelJobs = context.WithCancelCause(context.Background())
	g.clientCalls = newClientCalls(perClientLimit(cfg))
	g.userCalls = newClientCalls(perUserLimit(cfg), false)
	g.trusted, _ = parseTrustedProxies(cfg.TrustedProxies) // Validate reports a bad one
	g.calls = restcall.NewCalls(restcall.CallsConfig{
		MaxPending: cfg.MaxPendingCalls, MaxPendingPerClient: cfg.MaxPendingCallsPerClient,
		MaxResultBytes: cfg.MaxPendingResultBytes, MaxBytes: cfg.MaxPendingBytes,
		TTL: cfg.PendingCallTTL, KeepAlive: cfg.KeepAliveInterval,
		ClientID: g.clientID, Start: g.startRESTCall, Now: func() time.Time { return g.now() },
	})
	g.initAdmin()
	g.routes()
	return g
}

// Metrics returns the gateway's metrics (to register hooks of the pool).
func (g *Gateway) Metrics() *Metrics { return g.metrics }

func (g *Gateway) routes() {
	m := http.NewServeMux()
	api := func(pattern string, h http.HandlerFunc) { m.Handle(pattern, g.wrap(pattern, authAPI, h)) }
	admin := func(pattern string, h http.HandlerFunc) { m.Handle(pattern, g.wrap(pattern, authAdmin, h)) }
	open := func(pattern string, h http.HandlerFunc) { m.Handle(pattern, g.wrap(pattern, authNone, h)) }

	api("POST /v1/predict/{api_name}", g.userOwned(g.handlePredict))
	api("POST /v1/submit/{api_name}", g.userOwned(g.handleSubmit))
	for _, rt := range g.calls.Routes() { // Gradio's REST shape, whatever the backend
		api(rt.Pattern, g.userOwned(rt.Handler))
	}
	admin("GET /api/admin/pool-stats", g.handleStats)
	admin("POST /api/admin/reload", g.handleReload)
	g.autoscaleRoutes(admin)
	admin("POST /api/admin/replicas/{name}/{action}", g.handleReplicaControl)
	admin("GET /metrics", g.metrics.handler().ServeHTTP)
	open("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	open("GET /readyz", g.handleReady)
	g.mountFrontDoor(api, open)
	if g.front == nil { // no front door's cancel to wrap: the REST calls' own
		for _, p := range []string{"POST /gradio_api/cancel", "POST /cancel"} {
			api(p, g.calls.Cancel(nil))
		}
	}
	g.adminRoutes(m)
	open("/", g.handleNoRoute)
	g.unclean = g.wrap("/", authNone, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Code: "not_found",
			Message: "no such route: the path is not in canonical form (double slash, . or ..)"})
	})
	g.mux = m
}

// handleNoRoute answers 405 when the path exists for another method, else
// 404, both as JSON errors.
func (g *Gateway) handleNoRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if m == r.Method {
			continue
		}
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, pattern := g.mux.Handler(r2); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: clip(r.Method, 16) + " " + clip(r.URL.Path, maxEcho) + ": use " + strings.Join(allow, " or ")})
		return
	}
	writeError(w, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no such route: " + clip(r.Method, 16) + " " + clip(r.URL.Path, maxEcho)})
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.draining.Load() {
		// Each answer during a drain closes its connection: a caller
		// learns it from the answer, so no request is sent on a kept-alive
		// connection the gateway is closing (that was a reset or an EOF).
		w.Header().Set("Connection", "close")
	}
	if p := r.URL.Path; p != "" && p != "/" && cleanPath(p) != p {
		// ServeMux would answer an HTML redirect to the cleaned path that
		// no access line records: a path such as //api/admin/pool-stats
		// is not a route.
		g.unclean.ServeHTTP(w, r)
		return
	}
	g.serveTraced(w, r)
}

// cleanPath is path.Clean keeping a trailing slash, as ServeMux cleans.
func cleanPath(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// track counts a call in flight for the drain; the returned func ends it.
func (g *Gateway) track() func() {
	g.jobs.Add(1)
	g.inFlight.Add(1)
	return func() { g.inFlight.Add(-1); g.jobs.Done() }
}

func (g *Gateway) rejectDraining(w http.ResponseWriter) bool {
	if g.draining.Load() {
		writeError(w, errDraining())
		return true
	}
	return false
}

// perUserLimit is max_calls_per_user in effect: 0 derives it from the
// slots, a quarter of replicas × pool.max_connections, so that at least
// four users share them whoever holds the key, but never under
// minCallsPerUser: in a small pool a user's few calls wait their turn in
// the FIFO queue (others wait behind at most that many), where a limit of
// one or two would refuse an ordinary user's second tab.
func perUserLimit(cfg Config) int {
	if cfg.MaxCallsPerUser != 0 {
		return cfg.MaxCallsPerUser
	}
	pc := cfg.Pool.WithDefaults()
	return max(minCallsPerUser, len(pc.Replicas)*pc.MaxConnections/4)
}

// minCallsPerUser is the least derived max_calls_per_user.
const minCallsPerUser = 8

// perClientLimit is max_calls_per_client in effect, and whether loopback
// addresses are exempt from it. A value set applies to every client. 0
// derives it from the slots: half of replicas × pool.max_connections, so
// that one client never holds every slot (its waiting calls count in the
// same number, so it cannot fill the queue either). Waiting places are
// left out: counting them (half of 3 × (8 + 1000) is 1512) let one client
// take every slot. The derived limit applies where there is another
// client to protect:
//   - with API keys, to each key when two or more are configured (with
//     one key every caller is the same client);
//   - without keys, to each address except loopback ones: the seed's
//     set-up is one web app on the gateway's host calling for all its
//     users, which must have every slot (and a proxy on the host makes
//     every caller loopback, one client again).
//
// No limit when the backend is not a pool of configured replicas.
func perClientLimit(cfg Config) (limit int, exemptLoopback bool) {
	if cfg.MaxCallsPerClient != 0 {
		return cfg.MaxCallsPerClient, false
	}
	pc := cfg.Pool.WithDefaults()
	if len(pc.Replicas) == 0 || len(cfg.Secrets.APIKeys) == 1 {
		return -1, false
	}
	return max(1, len(pc.Replicas)*pc.MaxConnections/2), len(cfg.Secrets.APIKeys) == 0
}
