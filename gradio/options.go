package gradio

import (
	"log/slog"
	"net/http"
	"time"
)

// Defaults applied when the corresponding option is not given.
const (
	// DefaultHubURL is the Hugging Face Hub API base.
	DefaultHubURL = "https://huggingface.co"
	// defaultDialTimeout bounds TCP connect.
	defaultDialTimeout = 10 * time.Second
	// defaultTLSHandshakeTimeout bounds the TLS handshake.
	defaultTLSHandshakeTimeout = 10 * time.Second
	// defaultHeaderTimeout bounds the wait for response headers of
	// non-streaming requests (config, info, queue/join, upload, cancel).
	defaultHeaderTimeout = 30 * time.Second
	// DefaultHeartbeatInterval is Gradio's in-stream heartbeat period.
	DefaultHeartbeatInterval = 15 * time.Second
	// defaultStreamGapTimeout is the longest silence tolerated on a data stream
	// while calls are pending: about 3x the server's heartbeat interval.
	// Long calls are fine: the server keeps sending heartbeats.
	defaultStreamGapTimeout = 3 * DefaultHeartbeatInterval
	// defaultCancelTimeout bounds the /cancel request sent when a call's
	// context ends.
	defaultCancelTimeout = 5 * time.Second
	// defaultWakePollInterval is how often the Hub is asked for the stage of
	// a sleeping or building Space while waiting.
	defaultWakePollInterval = 2 * time.Second
	// defaultMaxIdleConnsPerHost sizes the idle pool of the Client's transport so
	// that 50+ parallel calls (two requests each) reuse connections.
	defaultMaxIdleConnsPerHost = 256
	// DefaultKeepAlive is how long an idle upstream connection is kept for
	// reuse. It is below uvicorn's own keep-alive (5 s), so the client
	// closes an idle connection before the server does: a request sent on
	// a connection the server is closing at that moment fails with
	// "connection reset" after it may have been read, which a pool cannot
	// retry safely.
	DefaultKeepAlive = 4 * time.Second
)

// Option configures Connect.
type Option func(*settings)

// secret holds a credential; its String and LogValue never show it.
type secret string

func (secret) String() string                 { return "[REDACTED]" }
func (secret) GoString() string               { return "[REDACTED]" }
func (secret) LogValue() slog.Value           { return slog.StringValue("[REDACTED]") }
func (s secret) reveal() string               { return string(s) }
func (s secret) MarshalText() ([]byte, error) { return []byte("[REDACTED]"), nil }

type settings struct {
	hfToken          secret
	hubURL           string
	httpClient       *http.Client
	user             string
	password         secret
	headers          http.Header
	logger           *slog.Logger
	wakeTimeout      time.Duration
	wakePoll         time.Duration
	headerTimeout    time.Duration
	streamGapTimeout time.Duration
	cancelTimeout    time.Duration
	heartbeat        int // 0 follow config.connect_heartbeat, 1 always, -1 never
	oauthToken       secret
	eagerInfo        bool
	callREST         bool // WithCallTransport
	keepAlive        time.Duration
	eventBudget      *EventBudget // with ownBudget; else the process's
	ownBudget        bool
}

func defaultSettings() settings {
	return settings{
		hubURL:           DefaultHubURL,
		wakePoll:         defaultWakePollInterval,
		headerTimeout:    defaultHeaderTimeout,
		streamGapTimeout: defaultStreamGapTimeout,
		cancelTimeout:    defaultCancelTimeout,
		keepAlive:        DefaultKeepAlive,
		headers:          http.Header{},
	}
}

// WithHFToken sets the Hugging Face token, sent as "Authorization: Bearer"
// to the Hub and to the app (as the JS client does; the HF proxy accepts it
// for private Spaces). It never appears in logs, errors or String output.
func WithHFToken(tok string) Option { return func(s *settings) { s.hfToken = secret(tok) } }

// WithHubURL sets the Hub API base URL (default DefaultHubURL); used to
// resolve Space ids. Tests point it at gradiotest.NewHub().URL.
func WithHubURL(u string) Option { return func(s *settings) { s.hubURL = trimSlash(u) } }

// WithHTTPClient makes the Client use hc for every request instead of its
// own tuned client. hc's Timeout must be 0 (a global deadline would cut long
// calls); size its Transport for your concurrency.
func WithHTTPClient(hc *http.Client) Option { return func(s *settings) { s.httpClient = hc } }

// WithLogin logs in to an auth-protected app (launch(auth=...)) with a form
// POST /login before fetching the config; the session cookies are kept for
// every later request of the Client and its sessions.
func WithLogin(user, pass string) Option {
	return func(s *settings) { s.user, s.password = user, secret(pass) }
}

// WithHeader adds a header to every request to the app (not to the Hub),
// e.g. "x-ip-token" for ZeroGPU quota pass-through. Repeatable.
func WithHeader(key, value string) Option { return func(s *settings) { s.headers.Add(key, value) } }

// WithLogger sets the logger (nil, the default, logs nothing).
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.logger = l } }

// WithWakeTimeout makes Connect wait up to d for a Space that is sleeping,
// building or starting to reach RUNNING, polling the Hub. 0 (default) fails
// fast with a *SpaceError.
func WithWakeTimeout(d time.Duration) Option { return func(s *settings) { s.wakeTimeout = d } }

// WithWakePollInterval sets how often the Hub is polled while waiting for a
// Space (default 2 s).
func WithWakePollInterval(d time.Duration) Option {
	return func(s *settings) {
		if d > 0 {
			s.wakePoll = d
		}
	}
}

// WithHeaderTimeout bounds the wait for response headers of non-streaming
// requests: config, info, queue/join, upload, cancel (default 30 s;
// negative disables).
func WithHeaderTimeout(d time.Duration) Option { return func(s *settings) { s.headerTimeout = d } }

// WithStreamGapTimeout sets the data-stream watchdog: the stream is considered
// dead after d without any bytes while calls are pending (default
// 45 s, three heartbeats; negative disables). Keep it above the app's heartbeat
// interval (15 s unless GRADIO_HEARTBEAT_INTERVAL is set).
func WithStreamGapTimeout(d time.Duration) Option {
	return func(s *settings) { s.streamGapTimeout = d }
}

// WithCancelTimeout bounds the /cancel request sent when a call's context
// ends (default 5 s).
func WithCancelTimeout(d time.Duration) Option {
	return func(s *settings) {
		if d > 0 {
			s.cancelTimeout = d
		}
	}
}

// WithHeartbeat forces the /heartbeat/{session} stream on (true) or off
// (false). By default it is kept exactly when the config says
// connect_heartbeat, as the JS client does.
func WithHeartbeat(on bool) Option {
	return func(s *settings) {
		if on {
			s.heartbeat = 1
		} else {
			s.heartbeat = -1
		}
	}
}

// WithOAuthToken sends tok as the "oauth_token" of calls to endpoints
// whose /info says they take a gr.OAuthToken (Gradio 6.x; as the Python
// client's oauth_token). Setting it makes the first call fetch /info.
func WithOAuthToken(tok string) Option { return func(s *settings) { s.oauthToken = secret(tok) } }

// WithKeepAlive sets how long an idle HTTP connection to the app is kept
// for reuse (default DefaultKeepAlive, 4 s). Keep it below the server's
// own keep-alive time-out (uvicorn: 5 s; a proxy in front of a Space may
// use another); zero or negative closes every connection after its
// request. It has no effect with WithHTTPClient.
func WithKeepAlive(d time.Duration) Option { return func(s *settings) { s.keepAlive = d } }

// WithEagerInfo makes Connect also fetch /info (one more round trip). By
// default /info is fetched lazily, the first time a call needs it (keyword
// arguments or parameter defaults) or APIInfo is called.
func WithEagerInfo() Option { return func(s *settings) { s.eagerInfo = true } }
