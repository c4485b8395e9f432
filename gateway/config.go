package gateway

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/pool"
	"go.yaml.in/yaml/v3"

	"github.com/gradiopool/gradiopool/internal/logattr"
)

// Defaults of the gateway's own keys of [Config]. The pool's keys default
// to package pool's constants (pool.DefaultMinConnections, ...), declared
// there once. Durations are wall-clock; sizes are bytes.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultMaxBodyBytes      = 10 << 20
	DefaultDrainTimeout      = 30 * time.Second
	DefaultKeepAlive         = 15 * time.Second
	DefaultPendingCallTTL    = 10 * time.Minute
	DefaultMaxPendingCalls   = 2000
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyReadTimeout   = 30 * time.Second // reading one request body
)

// Config is the gateway's whole configuration: what `gradiopool serve` reads
// from its YAML file, the environment and its flags (flags win over the
// environment, the environment over the file). The zero value is usable
// except that Replicas must be set; [Config.Normalize] applies the defaults.
//
// Secrets are never part of the file: they come only from the environment
// (see [Secrets]).
type Config struct {
	// Listen is the gateway's TCP address. Default DefaultListen.
	Listen string `yaml:"listen"`
	// Replicas are Space ids ("owner/name") or base URLs, in round-robin order.
	// Required.
	Replicas []string `yaml:"replicas"`
	// HubURL is the Hugging Face Hub API base used to resolve Space ids.
	// Empty means the client's default.
	HubURL string `yaml:"hub_url"`
	// Pool holds the session pool knobs.
	Pool PoolConfig `yaml:"pool"`
	// MaxBodyBytes bounds a request body; larger bodies get 413.
	// Zero means DefaultMaxBodyBytes (10 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// DrainTimeout is how long SIGTERM lets calls in flight finish before
	// they are cancelled. Zero means DefaultDrainTimeout (30 s).
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// KeepAliveInterval is the gap between ": keep-alive" comments on idle
	// event streams, so that proxies do not cut long calls. Zero means
	// DefaultKeepAlive (15 s).
	KeepAliveInterval time.Duration `yaml:"keepalive_interval"`
	// PendingCallTTL is how long the result of a call made through
	// POST /gradio_api/call/{api} is kept for its GET. Zero means
	// DefaultPendingCallTTL (10 min).
	PendingCallTTL time.Duration `yaml:"pending_call_ttl"`
	// MaxPendingCalls bounds the calls kept for /gradio_api/call GETs; when
	// full, new POSTs get 503. Zero means DefaultMaxPendingCalls (2000).
	MaxPendingCalls int `yaml:"max_pending_calls"`
	// MaxClientConnections bounds the client connections open at once;
	// past it, new connections wait to be accepted (slowloris, floods of
	// idle connections). Zero means DefaultMaxClientConnections (10000);
	// negative: no limit.
	MaxClientConnections int `yaml:"max_client_connections"`
	// MaxClientConnectionsPerAddress bounds the connections one client
	// address holds open; past it a new connection is answered 429. Zero
	// means DefaultMaxClientConnectionsPerAddress (1000); negative: no
	// limit.
	MaxClientConnectionsPerAddress int `yaml:"max_client_connections_per_address"`
	// Log selects the log format and level.
	Log LogConfig `yaml:"log"`
	// FrontDoor configures the Gradio front door (the gateway as one Gradio app).
	FrontDoor FrontDoorConfig `yaml:"frontdoor"`
	// Cluster makes several gateways one, through Redis.
	Cluster ClusterConfig `yaml:"cluster"`

	// Secrets come from the environment only (yaml:"-").
	Secrets Secrets `yaml:"-"`
}

// PoolConfig are the pool knobs of the seed design, per replica.
type PoolConfig struct {
	// MinConnections is the number of warm sessions kept per replica once
	// the pool is initialised. Zero means pool.DefaultMinConnections (5);
	// -1 keeps none.
	MinConnections int `yaml:"min_connections"`
	// MaxConnections caps the sessions (= calls in flight) per replica.
	// Zero means pool.DefaultMaxConnections (50).
	MaxConnections int `yaml:"max_connections"`
	// IdleTimeout removes sessions idle longer than this (never below the
	// minimum). Zero means pool.DefaultIdleTimeout (10 min); negative: never.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// QueueTimeout is how long a caller waits for a free session.
	// Zero means pool.DefaultQueueTimeout (30 s); negative: as long as the
	// caller's own deadline allows.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
	// HealthCheckInterval is the period of health checks.
	// Zero means pool.DefaultHealthCheckInterval (5 min); negative: no checks.
	HealthCheckInterval time.Duration `yaml:"health_check_interval"`
	// HealthCheckMaxConnections is how many idle sessions one round checks.
	// Zero means pool.DefaultHealthCheckMaxConnections (5).
	HealthCheckMaxConnections int `yaml:"health_check_max_connections"`
	// UnhealthyAfterFailures destroys a session after this many failed
	// checks in a row. Zero means pool.DefaultUnhealthyAfterFailures (3).
	UnhealthyAfterFailures int `yaml:"unhealthy_after_failures"`
	// ConnectRetries is how often a failed connect is retried before the
	// next replica is tried. Zero means pool.DefaultConnectRetries (3);
	// negative: no retry.
	ConnectRetries int `yaml:"connect_retries"`
	// EjectAfterRefusals ejects a replica that refused this many calls in a
	// row (5xx or a transport failure on queue/join). Zero means
	// pool.DefaultEjectAfterRefusals (3); negative: refusals never eject.
	EjectAfterRefusals int `yaml:"eject_after_refusals"`
	// UserAssignmentTTL is how long a user stays on its replica after
	// their last call. Zero means pool.DefaultUserAssignmentTTL (1 h); negative:
	// forever.
	UserAssignmentTTL time.Duration `yaml:"user_assignment_ttl"`
	// MaxWaiters bounds the callers waiting per replica; beyond it callers
	// get 503 at once. Zero means pool.DefaultMaxWaiters (1000).
	MaxWaiters int `yaml:"max_waiters"`
	// StickySessions keeps a registered user on one pooled session (and so
	// one gr.State) while it stays assigned. Default off.
	StickySessions bool `yaml:"sticky_sessions"`
	// PriorityMaxWait is the starvation bound of the priority classes
	// (X-Gradiopool-Priority): a waiter is promoted after it. Zero means
	// pool.DefaultPriorityMaxWait (10 s); negative: strict priority.
	PriorityMaxWait time.Duration `yaml:"priority_max_wait"`
	// Routing is how anonymous calls pick a replica: "expected_time"
	// (default: the Space's own queue, run time and concurrency) or
	// "least_in_use" (our calls only).
	Routing string `yaml:"routing"`
	// RebalanceFactor moves a registered user off their replica when a
	// call is expected to take more than this many times longer there
	// than on the quickest one. Zero (default): never (stickiness first).
	RebalanceFactor float64 `yaml:"rebalance_factor"`
	// WarmUp opens the minimum sessions at start instead of at the first
	// call. Default off.
	WarmUp bool `yaml:"warm_up"`
	// DemandWindow turns on demand tracking (sessions opened ahead of a
	// rising load, aged out by idle_timeout when it falls), averaging over
	// about this window. Zero (default): off.
	DemandWindow time.Duration `yaml:"demand_window"`
	// MaxLifetime retires sessions older than this (jittered, replaced
	// ahead while idle, never during a call). Zero (default): no limit.
	MaxLifetime time.Duration `yaml:"max_lifetime"`
	// IdleDisconnect is the Space's known idle disconnect: idle sessions
	// are replaced before it. Zero (default): none.
	IdleDisconnect time.Duration `yaml:"idle_disconnect"`
	// WakeSleeping wakes a Space found sleeping in the background, so that
	// the users pinned to it find it running. Default off.
	WakeSleeping bool `yaml:"wake_sleeping"`
}

// LogConfig selects the log output.
type LogConfig struct {
	// Format is "json", "text" or "auto" (text when stderr is a terminal,
	// else JSON). Empty means "auto".
	Format string `yaml:"format"`
	// Level is "debug", "info", "warn" or "error". Empty means "info".
	Level string `yaml:"level"`
}

// Secrets are read from the environment only and never logged, printed or
// returned: String, GoString and LogValue redact them.
type Secrets struct {
	// HFToken (HF_TOKEN) is sent to the Spaces.
	HFToken string
	// AdminToken (GRADIOPOOL_ADMIN_TOKEN) guards /api/admin/* and /metrics.
	// Empty means those endpoints are open.
	AdminToken string
	// APIKeys (GRADIOPOOL_API_KEYS, comma-separated) are the bearer keys
	// callers of /v1/* and /gradio_api/* must present. Empty means open.
	APIKeys []string
	// HashKey (GRADIOPOOL_HASH_KEY) keys the hash of e-mails. Empty means
	// a random key per process.
	HashKey string
	// RedisURL (GRADIOPOOL_REDIS_URL, e.g. redis://:password@host:6379/0
	// or rediss:// for TLS) makes this gateway a member of a cluster (see
	// [ClusterConfig]); it wins over cluster.redis_url. It needs HashKey,
	// so that every instance computes the same user keys.
	RedisURL string
}

func redact(s string) string {
	if s == "" {
		return "unset"
	}
	return "set"
}

// String says which secrets are set, never their values.
func (s Secrets) String() string {
	return fmt.Sprintf("hf_token=%s admin_token=%s api_keys=%d hash_key=%s redis_url=%s",
		redact(s.HFToken), redact(s.AdminToken), len(s.APIKeys), redact(s.HashKey), redact(s.RedisURL))
}

// GoString redacts like String, so %#v cannot leak a secret.
func (s Secrets) GoString() string { return "gateway.Secrets{" + s.String() + "}" }

// LogValue redacts like String.
func (s Secrets) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("hf_token", redact(s.HFToken)),
		slog.String("admin_token", redact(s.AdminToken)),
		slog.Int("api_keys", len(s.APIKeys)),
		slog.String("hash_key", redact(s.HashKey)),
		slog.String("redis_url", redact(s.RedisURL)),
	)
}

// LogValue is the configuration as logged at start-up (secrets redacted).
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("listen", c.Listen),
		slog.Any("replicas", publicReplicas(c.Replicas)),
		slog.String("hub_url", c.HubURL),
		slog.Int("min_connections", c.Pool.MinConnections),
		slog.Int("max_connections", c.Pool.MaxConnections),
		logattr.Ms("idle_timeout", c.Pool.IdleTimeout),
		logattr.Ms("queue_timeout", c.Pool.QueueTimeout),
		logattr.Ms("health_check_interval", c.Pool.HealthCheckInterval),
		slog.Int("health_check_max_connections", c.Pool.HealthCheckMaxConnections),
		slog.Int("unhealthy_after_failures", c.Pool.UnhealthyAfterFailures),
		slog.Int("connect_retries", c.Pool.ConnectRetries),
		slog.Int("eject_after_refusals", c.Pool.EjectAfterRefusals),
		logattr.Ms("user_assignment_ttl", c.Pool.UserAssignmentTTL),
		slog.Int("max_waiters", c.Pool.MaxWaiters),
		slog.Bool("sticky_sessions", c.Pool.StickySessions),
		logattr.Ms("priority_max_wait", c.Pool.PriorityMaxWait),
		slog.String("routing", c.Pool.Routing),
		slog.Float64("rebalance_factor", c.Pool.RebalanceFactor),
		slog.Bool("warm_up", c.Pool.WarmUp),
		logattr.Ms("demand_window", c.Pool.DemandWindow),
		logattr.Ms("max_lifetime", c.Pool.MaxLifetime),
		logattr.Ms("idle_disconnect", c.Pool.IdleDisconnect),
		slog.Bool("wake_sleeping", c.Pool.WakeSleeping),
		slog.Int64("max_body_bytes", c.MaxBodyBytes),
		logattr.Ms("drain_timeout", c.DrainTimeout),
		logattr.Ms("keepalive_interval", c.KeepAliveInterval),
		slog.Int("max_client_connections", c.MaxClientConnections),
		slog.Int("max_client_connections_per_address", c.MaxClientConnectionsPerAddress),
		slog.Any("cluster", c.Cluster),
		slog.Any("secrets", c.Secrets),
	)
}

// String is the configuration in one line, secrets redacted.
func (c Config) String() string {
	return fmt.Sprintf("listen=%s replicas=%v pool=%+v %s", c.Listen, publicReplicas(c.Replicas), c.Pool, c.Secrets)
}

// publicReplicas drops credentials a replica URL may carry (user:pass@,
// query strings) before it is logged.
func publicReplicas(rs []string) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r
		if u, err := url.Parse(r); err == nil && u.Host != "" && (u.User != nil || u.RawQuery != "") {
			u.User, u.RawQuery = nil, ""
			out[i] = u.String()
		}
	}
	return out
}

// Normalize replaces zero values by their defaults.
func (c *Config) Normalize() {
	def := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	defd := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	def(&c.Pool.MinConnections, pool.DefaultMinConnections)
	def(&c.Pool.MaxConnections, pool.DefaultMaxConnections)
	defd(&c.Pool.IdleTimeout, pool.DefaultIdleTimeout)
	defd(&c.Pool.QueueTimeout, pool.DefaultQueueTimeout)
	defd(&c.Pool.HealthCheckInterval, pool.DefaultHealthCheckInterval)
	def(&c.Pool.HealthCheckMaxConnections, pool.DefaultHealthCheckMaxConnections)
	def(&c.Pool.UnhealthyAfterFailures, pool.DefaultUnhealthyAfterFailures)
	def(&c.Pool.ConnectRetries, pool.DefaultConnectRetries)
	def(&c.Pool.EjectAfterRefusals, pool.DefaultEjectAfterRefusals)
	defd(&c.Pool.UserAssignmentTTL, pool.DefaultUserAssignmentTTL)
	def(&c.Pool.MaxWaiters, pool.DefaultMaxWaiters)
	defd(&c.Pool.PriorityMaxWait, pool.DefaultPriorityMaxWait)
	if c.Pool.Routing == "" {
		c.Pool.Routing = routingExpectedTime
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	defd(&c.DrainTimeout, DefaultDrainTimeout)
	defd(&c.KeepAliveInterval, DefaultKeepAlive)
	defd(&c.PendingCallTTL, DefaultPendingCallTTL)
	def(&c.MaxPendingCalls, DefaultMaxPendingCalls)
	def(&c.MaxClientConnections, DefaultMaxClientConnections)
	def(&c.MaxClientConnectionsPerAddress, DefaultMaxClientConnectionsPerAddress)
	if c.Log.Format == "" {
		c.Log.Format = "auto"
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	c.Cluster.normalize()
}

// Validate reports every problem of a normalized configuration at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(c.Replicas) == 0 {
		bad("replicas: at least one replica (Space id or URL) is required (key replicas, env GRADIOPOOL_REPLICAS, flag --replicas)")
	}
	seen := map[string]bool{}
	for i, r := range c.Replicas {
		switch {
		case strings.TrimSpace(r) == "":
			bad("replicas[%d]: empty", i)
		case seen[r]:
			bad("replicas[%d]: %q listed twice", i, r)
		case !strings.HasPrefix(r, "http://") && !strings.HasPrefix(r, "https://") && strings.Count(r, "/") != 1:
			bad("replicas[%d]: %q is neither a Space id (owner/name) nor an http(s) URL", i, r)
		}
		seen[r] = true
	}
	p := c.Pool
	if p.MaxConnections < 1 {
		bad("pool.max_connections: %d, must be at least 1", p.MaxConnections)
	}
	if p.MinConnections < -1 {
		bad("pool.min_connections: %d, want -1 (none) or more", p.MinConnections)
	}
	if p.MinConnections > p.MaxConnections {
		bad("pool.min_connections (%d) is above pool.max_connections (%d)", p.MinConnections, p.MaxConnections)
	}
	// Negative pool durations and connect_retries are documented "off"
	// values, passed to the pool as they are.
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"drain_timeout", c.DrainTimeout}, {"keepalive_interval", c.KeepAliveInterval},
		{"pending_call_ttl", c.PendingCallTTL},
	} {
		if d.v < 0 {
			bad("%s: %v, must not be negative", d.key, d.v)
		}
	}
	for _, n := range []struct {
		key string
		v   int
	}{
		{"pool.health_check_max_connections", p.HealthCheckMaxConnections},
		{"pool.unhealthy_after_failures", p.UnhealthyAfterFailures},
		{"pool.max_waiters", p.MaxWaiters},
		{"max_pending_calls", c.MaxPendingCalls},
	} {
		if n.v < 0 {
			bad("%s: %d, must not be negative", n.key, n.v)
		}
	}
	if c.MaxBodyBytes < 0 {
		bad("max_body_bytes: %d, must not be negative", c.MaxBodyBytes)
	}
	switch p.Routing {
	case routingExpectedTime, routingLeastInUse:
	default:
		bad("pool.routing: %q, want %s or %s", p.Routing, routingExpectedTime, routingLeastInUse)
	}
	if f := p.RebalanceFactor; f != 0 && !(f >= 1) {
		bad("pool.rebalance_factor: %v, want 0 (off) or at least 1", f)
	}
	switch c.Log.Format {
	case "auto", "json", "text":
	default:
		bad("log.format: %q, want auto, json or text", c.Log.Format)
	}
	if _, err := parseLevel(c.Log.Level); err != nil {
		bad("log.level: %v", err)
	}
	if c.RedisURL() != "" && c.Secrets.HashKey == "" {
		bad("GRADIOPOOL_REDIS_URL is set but GRADIOPOOL_HASH_KEY is not: instances sharing Redis need the same hash key")
	}
	errs = append(errs, c.Cluster.validate()...)
	if c.Listen != "" && !strings.Contains(c.Listen, ":") {
		bad("listen: %q, want host:port", c.Listen)
	}
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q, want debug, info, warn or error", s)
	}
	return l, nil
}

// LoadFile reads a YAML configuration into c; keys absent from the file
// keep their current values. Unknown keys are errors naming the line.
func (c *Config) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return c.LoadYAML(path, b)
}

// LoadYAML is LoadFile on bytes; name is used in messages.
func (c *Config) LoadYAML(name string, b []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	err := dec.Decode(c)
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			msgs[i] = clarifyYAML(m)
		}
		return fmt.Errorf("config %s: %s", name, strings.Join(msgs, "; "))
	}
	return fmt.Errorf("config %s: %w", name, err)
}

// unknownKey matches yaml's "line 3: field bogus not found in type ...".
var unknownKey = regexp.MustCompile(`^(line \d+): field (\S+) not found in type \S+$`)

// clarifyYAML rewrites yaml's messages in the words of the configuration.
func clarifyYAML(m string) string {
	if g := unknownKey.FindStringSubmatch(m); g != nil {
		return fmt.Sprintf("%s: unknown key %q", g[1], g[2])
	}
	if strings.HasSuffix(m, "into time.Duration") {
		return m + " (want a duration such as 30s, 10m or 1h)"
	}
	return m
}

// setting is one key of the configuration with its environment variable
// and flag, so the three sources cannot drift apart.
type setting struct {
	key, env, flag, usage string
	set                   func(c *Config, v string) error
	kind                  flagKind // how the flag is typed in -h
	def                   any      // the default, shown in the usage text; nil: none
}

type flagKind int

const (
	kindString flagKind = iota
	kindInt
	kindDuration
	kindBool
)

func intSetter(f func(c *Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		*f(c) = n
		return nil
	}
}

func durSetter(f func(c *Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 30s, 10m, 1h)", v)
		}
		*f(c) = d
		return nil
	}
}

func strSetter(f func(c *Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *f(c) = strings.TrimSpace(v); return nil }
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// floatSetter parses a decimal key.
func floatSetter(f func(c *Config) *float64) func(*Config, string) error {
	return func(c *Config, v string) error {
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		*f(c) = x
		return nil
	}
}

// Values of PoolConfig.Routing.
const (
	routingExpectedTime = "expected_time"
	routingLeastInUse   = "least_in_use"
)

// boolSetter parses a boolean key.
func boolSetter(f func(c *Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not a boolean", v)
		}
		*f(c) = b
		return nil
	}
}

// settings is every key with its environment variable, flag, usage and
// default (from the constants, so the usage text cannot drift from them).
var settings = []setting{
	{"listen", "GRADIOPOOL_LISTEN", "listen", "TCP address to listen on",
		strSetter(func(c *Config) *string { return &c.Listen }), kindString, DefaultListen},
	{"replicas", "GRADIOPOOL_REPLICAS", "replicas", "comma-separated Space ids or URLs",
		func(c *Config, v string) error { c.Replicas = splitList(v); return nil }, kindString, nil},
	{"hub_url", "GRADIOPOOL_HUB_URL", "hub-url", "Hugging Face Hub API base URL",
		strSetter(func(c *Config) *string { return &c.HubURL }), kindString, "the client's"},
	{"pool.min_connections", "GRADIOPOOL_POOL_MIN_CONNECTIONS", "min-connections", "warm sessions per replica; -1 none",
		intSetter(func(c *Config) *int { return &c.Pool.MinConnections }), kindInt, pool.DefaultMinConnections},
	{"pool.max_connections", "GRADIOPOOL_POOL_MAX_CONNECTIONS", "max-connections", "max sessions (calls in flight) per replica",
		intSetter(func(c *Config) *int { return &c.Pool.MaxConnections }), kindInt, pool.DefaultMaxConnections},
	{"pool.idle_timeout", "GRADIOPOOL_POOL_IDLE_TIMEOUT", "idle-timeout", "idle session removed after; negative never",
		durSetter(func(c *Config) *time.Duration { return &c.Pool.IdleTimeout }), kindDuration, pool.DefaultIdleTimeout},
	{"pool.queue_timeout", "GRADIOPOOL_POOL_QUEUE_TIMEOUT", "queue-timeout", "max wait for a free session; negative: the caller's deadline",
		durSetter(func(c *Config) *time.Duration { return &c.Pool.QueueTimeout }), kindDuration, pool.DefaultQueueTimeout},
	{"pool.health_check_interval", "GRADIOPOOL_POOL_HEALTH_CHECK_INTERVAL", "health-check-interval", "health check period; negative none",
		durSetter(func(c *Config) *time.Duration { return &c.Pool.HealthCheckInterval }), kindDuration, pool.DefaultHealthCheckInterval},
	{"pool.health_check_max_connections", "GRADIOPOOL_POOL_HEALTH_CHECK_MAX_CONNECTIONS", "health-check-max-connections", "idle sessions checked per round",
		intSetter(func(c *Config) *int { return &c.Pool.HealthCheckMaxConnections }), kindInt, pool.DefaultHealthCheckMaxConnections},
	{"pool.unhealthy_after_failures", "GRADIOPOOL_POOL_UNHEALTHY_AFTER_FAILURES", "unhealthy-after-failures", "failed checks in a row before a session is destroyed",
		intSetter(func(c *Config) *int { return &c.Pool.UnhealthyAfterFailures }), kindInt, pool.DefaultUnhealthyAfterFailures},
	{"pool.connect_retries", "GRADIOPOOL_POOL_CONNECT_RETRIES", "connect-retries", "connect retries before the next replica; negative none",
		intSetter(func(c *Config) *int { return &c.Pool.ConnectRetries }), kindInt, pool.DefaultConnectRetries},
	{"pool.eject_after_refusals", "GRADIOPOOL_POOL_EJECT_AFTER_REFUSALS", "eject-after-refusals", "refused calls in a row before a replica is ejected; negative never",
		intSetter(func(c *Config) *int { return &c.Pool.EjectAfterRefusals }), kindInt, pool.DefaultEjectAfterRefusals},
	{"pool.user_assignment_ttl", "GRADIOPOOL_POOL_USER_ASSIGNMENT_TTL", "user-assignment-ttl", "user -> replica assignment kept after the last call; negative forever",
		durSetter(func(c *Config) *time.Duration { return &c.Pool.UserAssignmentTTL }), kindDuration, pool.DefaultUserAssignmentTTL},
	{"pool.max_waiters", "GRADIOPOOL_POOL_MAX_WAITERS", "max-waiters", "max callers waiting per replica",
		intSetter(func(c *Config) *int { return &c.Pool.MaxWaiters }), kindInt, pool.DefaultMaxWaiters},
	{"pool.sticky_sessions", "GRADIOPOOL_POOL_STICKY_SESSIONS", "sticky-sessions", "keep a user on one session (gr.State)",
		boolSetter(func(c *Config) *bool { return &c.Pool.StickySessions }), kindBool, false},
	{"pool.priority_max_wait", "GRADIOPOOL_POOL_PRIORITY_MAX_WAIT", "priority-max-wait", "a waiter of a lower priority class is served after waiting this long; negative strict priority",
		durSetter(func(c *Config) *time.Duration { return &c.Pool.PriorityMaxWait }), kindDuration, pool.DefaultPriorityMaxWait},
	{"pool.routing", "GRADIOPOOL_POOL_ROUTING", "routing", "anonymous calls: expected_time (the Space's own queue) or least_in_use",
		strSetter(func(c *Config) *string { return &c.Pool.Routing }), kindString, routingExpectedTime},
	{"pool.rebalance_factor", "GRADIOPOOL_POOL_REBALANCE_FACTOR", "rebalance-factor", "move a user whose replica is expected this many times slower than the best; 0 never",
		floatSetter(func(c *Config) *float64 { return &c.Pool.RebalanceFactor }), kindString, 0},
	{"pool.warm_up", "GRADIOPOOL_POOL_WARM_UP", "warm-up", "open the minimum sessions at start, not at the first call",
		boolSetter(func(c *Config) *bool { return &c.Pool.WarmUp }), kindBool, false},
	{"pool.demand_window", "GRADIOPOOL_POOL_DEMAND_WINDOW", "demand-window", "open sessions ahead of a load rising above its average over this window; 0 off",
		durSetter(func(c *Config) *time.Duration { return &c.Pool.DemandWindow }), kindDuration, 0},
	{"pool.max_lifetime", "GRADIOPOOL_POOL_MAX_LIFETIME", "max-lifetime", "retire sessions this old (jittered; replaced ahead while idle, never during a call); 0 never",
		durSetter(func(c *Config) *time.Duration { return &c.Pool.MaxLifetime }), kindDuration, 0},
	{"pool.idle_disconnect", "GRADIOPOOL_POOL_IDLE_DISCONNECT", "idle-disconnect", "the Space drops sessions idle this long: replace idle ones before; 0 none",
		durSetter(func(c *Config) *time.Duration { return &c.Pool.IdleDisconnect }), kindDuration, 0},
	{"pool.wake_sleeping", "GRADIOPOOL_POOL_WAKE_SLEEPING", "wake-sleeping", "wake a Space found sleeping in the background (calls fail over meanwhile)",
		boolSetter(func(c *Config) *bool { return &c.Pool.WakeSleeping }), kindBool, false},
	{"max_body_bytes", "GRADIOPOOL_MAX_BODY_BYTES", "max-body-bytes", "max request body in bytes",
		func(c *Config, v string) error {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return fmt.Errorf("%q is not an integer", v)
			}
			c.MaxBodyBytes = n
			return nil
		}, kindInt, DefaultMaxBodyBytes},
	{"drain_timeout", "GRADIOPOOL_DRAIN_TIMEOUT", "drain-timeout", "on SIGTERM, time calls in flight may take",
		durSetter(func(c *Config) *time.Duration { return &c.DrainTimeout }), kindDuration, DefaultDrainTimeout},
	{"keepalive_interval", "GRADIOPOOL_KEEPALIVE_INTERVAL", "keepalive-interval", "keep-alive comment period on event streams",
		durSetter(func(c *Config) *time.Duration { return &c.KeepAliveInterval }), kindDuration, DefaultKeepAlive},
	{"pending_call_ttl", "GRADIOPOOL_PENDING_CALL_TTL", "pending-call-ttl", "how long /gradio_api/call results are kept",
		durSetter(func(c *Config) *time.Duration { return &c.PendingCallTTL }), kindDuration, DefaultPendingCallTTL},
	{"max_pending_calls", "GRADIOPOOL_MAX_PENDING_CALLS", "max-pending-calls", "max /gradio_api/call results kept",
		intSetter(func(c *Config) *int { return &c.MaxPendingCalls }), kindInt, DefaultMaxPendingCalls},
	{"log.format", "GRADIOPOOL_LOG_FORMAT", "log-format", "auto, json or text",
		strSetter(func(c *Config) *string { return &c.Log.Format }), kindString, "auto"},
	{"log.level", "GRADIOPOOL_LOG_LEVEL", "log-level", "debug, info, warn or error",
		strSetter(func(c *Config) *string { return &c.Log.Level }), kindString, "info"},
}

// usageText is a setting's usage with its default, e.g.
// "max sessions (calls in flight) per replica (default 50)".
func (s setting) usageText() string {
	if s.def == nil {
		return s.usage
	}
	return fmt.Sprintf("%s (default %s)", s.usage, formatDefault(s.def))
}

// formatDefault writes durations the way they are configured ("10m", not
// "10m0s").
func formatDefault(v any) string {
	d, ok := v.(time.Duration)
	if !ok {
		return fmt.Sprint(v)
	}
	out := d.String()
	if strings.HasSuffix(out, "m0s") {
		out = strings.TrimSuffix(out, "0s")
	}
	if strings.HasSuffix(out, "h0m") {
		out = strings.TrimSuffix(out, "0m")
	}
	return out
}

// ConfigEnvFile is the environment variable naming the YAML file when no
// --config flag is given.
const ConfigEnvFile = "GRADIOPOOL_CONFIG"

// ApplyEnv sets every key whose environment variable is non-empty, and
// reads the secrets. lookup is os.LookupEnv or a test's map.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	var errs []error
	for _, s := range settings {
		if v, ok := lookup(s.env); ok && v != "" {
			if err := s.set(c, v); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", s.env, s.key, err))
			}
		}
	}
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	c.Secrets = Secrets{
		HFToken:    get("HF_TOKEN"),
		AdminToken: get("GRADIOPOOL_ADMIN_TOKEN"),
		APIKeys:    splitList(get("GRADIOPOOL_API_KEYS")),
		HashKey:    get("GRADIOPOOL_HASH_KEY"),
		RedisURL:   get("GRADIOPOOL_REDIS_URL"),
	}
	return errors.Join(errs...)
}

// Flags registers one typed flag per key on fs and returns a function that
// applies, after fs.Parse, only the flags that were set (so that an unset
// flag never overrides the environment or the file).
func Flags(fs *flag.FlagSet) func(c *Config) error {
	for _, s := range settings {
		usage := s.usageText() + " [env " + s.env + "]"
		switch s.kind {
		case kindInt:
			fs.Int(s.flag, 0, usage)
		case kindDuration:
			fs.Duration(s.flag, 0, usage)
		case kindBool:
			fs.Bool(s.flag, false, usage)
		default:
			fs.String(s.flag, "", usage)
		}
	}
	return func(c *Config) error {
		var errs []error
		fs.Visit(func(f *flag.Flag) {
			for _, s := range settings {
				if s.flag == f.Name {
					if err := s.set(c, f.Value.String()); err != nil {
						errs = append(errs, fmt.Errorf("--%s: %w", s.flag, err))
					}
				}
			}
		})
		return errors.Join(errs...)
	}
}

// Setting describes one configuration key, for docs and tests.
type Setting struct {
	Key, Env, Flag, Usage string
	Default               string // "" when the key has none
}

// Settings lists every key with its environment variable, flag, usage and
// default, in the order of the usage text: the source of the README's
// configuration table (a test checks that the README matches it).
func Settings() []Setting {
	out := make([]Setting, len(settings))
	for i, s := range settings {
		out[i] = Setting{Key: s.key, Env: s.env, Flag: "--" + s.flag, Usage: s.usage}
		if s.def != nil {
			out[i].Default = formatDefault(s.def)
		}
	}
	return out
}
