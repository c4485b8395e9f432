package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/gateway/frontdoor"
	"github.com/gradiopool/gradiopool/pool"
	"go.yaml.in/yaml/v3"
)

// Defaults of the gateway's own keys of [Config]. The pool's keys default to
// what pool.Config.WithDefaults fills in, declared there once. Durations
// are wall-clock; sizes are bytes.
const (
	DefaultListen          = "127.0.0.1:8080"
	defaultMaxBodyBytes    = frontdoor.DefaultMaxBodyBytes // 10 MiB, for /v1 and the front door alike
	DefaultDrainTimeout    = 30 * time.Second
	defaultKeepAlive       = 15 * time.Second
	defaultPendingCallTTL  = 10 * time.Minute
	defaultMaxPendingCalls = 2000
	// defaultMaxPendingCallsPerClient leaves the others room in
	// max_pending_calls.
	defaultMaxPendingCallsPerClient = 100
	// defaultMaxPendingResultBytes is the replicas' own answer bound
	// (16 MiB); defaultMaxPendingBytes bounds the heap the unread
	// results of everyone take.
	defaultMaxPendingResultBytes = 16 << 20
	defaultMaxPendingBytes       = 256 << 20
	defaultReadHeaderTimeout     = 10 * time.Second
	defaultBodyReadTimeout       = 30 * time.Second // reading one request body
	// defaultWriteStall bounds how long a caller may take no byte of its
	// answer (nginx's send_timeout, 60 s, is the same rule).
	defaultWriteStall = 60 * time.Second
)

// Config is the gateway's whole configuration: what `gradiopool serve` reads
// from its YAML file, the environment and its flags (flags win over the
// environment, the environment over the file). Every key is declared once,
// in the settings table (see [Settings]), with its environment variable,
// flag, default and help. The zero value is usable except that
// Pool.Replicas must be set; [Config.Normalize] applies the defaults.
//
// Secrets are never part of the file: they come only from the environment
// (see [Secrets]).
type Config struct {
	// Listen is the gateway's TCP address. Default DefaultListen.
	Listen string
	// HubURL is the Hugging Face Hub API base used to resolve Space ids.
	// Empty means the client's default.
	HubURL string
	// Pool is the pool's configuration (key replicas and the pool.* keys):
	// its fields, defaults and meaning are pool.Config's. The gateway adds
	// the client options (token, Hub URL), the hash key, the logger and the
	// metrics hook when it opens the pool (see [Config.PoolConfig]).
	Pool pool.Config
	// UpstreamKeepAlive closes idle connections to a replica after this
	// long; keep it below the server's own keep-alive (uvicorn: 5 s).
	// Zero means gradio.DefaultKeepAlive (4 s); negative: no reuse.
	UpstreamKeepAlive time.Duration
	// UpstreamEventBytes bounds the bytes the gateway holds, in total, of
	// its replicas' events read in part (every call's data stream, the
	// front door's relays), beyond 64 KiB per stream; one event is also
	// limited to 64 MiB. Each replica has a fair share of it, and each
	// caller of a replica (eventParty) a fair share of that: past it the
	// party most over its own loses its largest stream, whose calls end
	// with gradio.ErrEventTooLarge, as a replica fault, or as the caller's
	// (gradio.ErrEventShare, 429 event_share) when the caller ran more
	// streams there than its others. Zero means gradio.DefaultEventBudgetBytes
	// (256 MiB); negative: no total limit.
	UpstreamEventBytes int64
	// MaxBodyBytes bounds a request body; larger bodies get 413.
	// Zero means defaultMaxBodyBytes (10 MiB).
	MaxBodyBytes int64
	// DrainTimeout is how long SIGTERM lets calls in flight finish before
	// they are cancelled. Zero means DefaultDrainTimeout (30 s).
	DrainTimeout time.Duration
	// KeepAliveInterval is the gap between ": keep-alive" comments on idle
	// event streams, so that proxies do not cut long calls. Zero means
	// defaultKeepAlive (15 s).
	KeepAliveInterval time.Duration
	// PendingCallTTL is how long the result of a call made through
	// POST /gradio_api/call/{api} is kept for its GET. Zero means
	// defaultPendingCallTTL (10 min).
	PendingCallTTL time.Duration
	// MaxPendingCalls bounds the calls kept for /gradio_api/call GETs; when
	// full, new POSTs get 503. Zero means defaultMaxPendingCalls (2000).
	MaxPendingCalls int
	// MaxPendingCallsPerClient bounds the calls one client (its API key,
	// else its address) has kept for GETs; past it new POSTs get 429.
	// Negative: no limit.
	MaxPendingCallsPerClient int
	// MaxPendingResultBytes bounds the output one call keeps unread (a
	// generator's outputs until they are read); MaxPendingBytes everyone's.
	// Past either the call is stopped with result_too_large. Negative: no
	// limit.
	MaxPendingResultBytes int64
	MaxPendingBytes       int64
	// MaxClientConnections bounds the client connections open at once;
	// past it, new connections wait to be accepted (slowloris, floods of
	// idle connections). Zero means defaultMaxClientConnections (10000);
	// negative: no limit.
	MaxClientConnections int
	// MaxClientConnectionsPerAddress bounds the connections one client
	// address holds open; past it a new connection is answered 429. Zero
	// means defaultMaxClientConnectionsPerAddress (1000); negative: no
	// limit.
	MaxClientConnectionsPerAddress int
	// MaxCallsPerClient bounds the calls one client (API key, else address)
	// has in flight on /v1, /gradio_api/call and the front door, waiting or
	// running; past it a call is answered 429. Zero means half of the
	// slots (replicas × pool.max_connections ÷ 2: 75 for three replicas at
	// the defaults), so one client can never take every slot, applied to
	// each key when two or more API keys are set, else to each address
	// except loopback ones (the seed's web app on the gateway's host calls
	// for all its users); with one key, none. A value set applies to every
	// client. Negative: no limit.
	MaxCallsPerClient int
	// MaxCallsPerUser bounds the calls one user (the X-Gradiopool-User
	// header, counted within its client: another key cannot use up a
	// user's share) has in flight, as MaxCallsPerClient does per client:
	// a web app holding the gateway's single key serves many users, and
	// one of them must not take every slot. Zero means a quarter of the
	// slots (replicas × pool.max_connections ÷ 4: 37 for three replicas
	// at the defaults), at least 8 (in a small pool a user's few calls
	// wait their turn in the FIFO queue). Negative: no limit. Anonymous
	// calls have only the client's limit.
	MaxCallsPerUser int
	// TrustedProxies are the CIDRs (or single addresses) of the reverse
	// proxies in front of the gateway. A request from one of them is the
	// client's whose address X-Forwarded-For names (else Forwarded's
	// for=): the nearest hop, from the right, that is not itself a
	// trusted proxy. From any other peer those headers are ignored: a
	// client cannot choose its own address. The client's address keys
	// the per-client limits and owners when no API keys are set.
	TrustedProxies []string
	// Log selects the log format and level.
	Log LogConfig
	// FrontDoor configures the Gradio front door (the gateway as one Gradio app).
	FrontDoor FrontDoorConfig
	// Cluster makes several gateways one, through Redis.
	Cluster ClusterConfig
	// Autoscale parks unneeded Spaces and wakes them ahead of demand.
	Autoscale AutoscaleConfig

	// Secrets come from the environment only.
	Secrets Secrets

	// normalized is set by Normalize, so that it runs once.
	normalized bool
}

// LogConfig selects the log output.
type LogConfig struct {
	// Format is "json", "text" or "auto" (text when stderr is a terminal,
	// else JSON). Empty means "auto".
	Format string
	// Level is "debug", "info", "warn" or "error". Empty means "info".
	Level string
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

// Validate reports every problem of a normalized configuration at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(c.Pool.Replicas) == 0 {
		bad("replicas: at least one replica (Space id or URL) is required (key replicas, env GRADIOPOOL_REPLICAS, flag --replicas)")
	}
	seen := map[string]int{} // replicaIdentity -> index
	for i, r := range c.Pool.Replicas {
		id := replicaIdentity(r)
		first, dup := seen[id]
		switch {
		case strings.TrimSpace(r) == "":
			bad("replicas[%d]: empty", i)
		case spacePage(r) != "":
			bad("replicas[%d]: %q is the Space's page on the Hub, not its app: give the Space id %s", i, r, spacePage(r))
		case dup:
			bad("replicas[%d]: %q is replicas[%d] (%q) again: list each replica once", i, r, first, c.Pool.Replicas[first])
		case !strings.HasPrefix(r, "http://") && !strings.HasPrefix(r, "https://") && strings.Count(r, "/") != 1:
			bad("replicas[%d]: %q is neither a Space id (owner/name) nor an http(s) URL", i, r)
		}
		if !dup {
			seen[id] = i
		}
	}
	p := c.Pool
	if p.MaxConnections < 1 {
		// min_connections is not checked then: its default is derived
		// from the maximum, and would be blamed for a value never set.
		bad("pool.max_connections: %d, must be at least 1", p.MaxConnections)
	} else {
		if p.MinConnections < -1 {
			bad("pool.min_connections: %d, want -1 (none) or more", p.MinConnections)
		}
		if p.MinConnections > p.MaxConnections {
			bad("pool.min_connections (%d) is above pool.max_connections (%d)", p.MinConnections, p.MaxConnections)
		}
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
	if u := c.FrontDoor.PublicURL; u != "" {
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.User != nil || pu.RawQuery != "" || pu.Fragment != "" {
			bad("frontdoor.public_url: %q, want http(s)://host[:port][/path] without credentials or query", u)
		}
	}
	if c.MaxBodyBytes < 0 {
		bad("max_body_bytes: %d, must not be negative", c.MaxBodyBytes)
	}
	switch p.Routing {
	case pool.RouteExpectedTime, pool.RouteLeastInUse:
	default:
		bad("pool.routing: %q, want %s or %s", p.Routing, pool.RouteExpectedTime, pool.RouteLeastInUse)
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
	errs = append(errs, c.Autoscale.validate(c)...)
	if _, err := parseTrustedProxies(c.TrustedProxies); err != nil {
		bad("trusted_proxies: %v", err)
	}
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

// LoadYAML is LoadFile on bytes; name is used in messages. The file's
// keys are the settings table's: each value is decoded into the key's
// field, so a file, the environment and the flags cannot disagree on a
// key's name or type.
func (c *Config) LoadYAML(name string, b []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("config %s: %w", name, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 || doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null" {
		return nil // empty file
	}
	var msgs []string
	c.loadMapping(doc.Content[0], "", &msgs)
	if len(msgs) > 0 {
		return fmt.Errorf("config %s: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}

// loadMapping decodes the keys of the mapping m under the section prefix
// ("" or "pool."), appending one message per problem.
func (c *Config) loadMapping(m *yaml.Node, prefix string, msgs *[]string) {
	if m.Kind != yaml.MappingNode {
		where := "the file"
		if prefix != "" {
			where = strings.TrimSuffix(prefix, ".")
		}
		*msgs = append(*msgs, fmt.Sprintf("line %d: %s must be a mapping of keys", m.Line, where))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if line, dup := seen[k.Value]; dup {
			*msgs = append(*msgs, fmt.Sprintf("line %d: key %q already given on line %d", k.Line, k.Value, line))
			continue
		}
		seen[k.Value] = k.Line
		key := prefix + k.Value
		if s := settingByKey(key); s != nil {
			if err := s.decode(c, v); err != nil {
				*msgs = append(*msgs, fmt.Sprintf("line %d: %s: %v", v.Line, key, err))
			}
			continue
		}
		if isSection(key) {
			c.loadMapping(v, key+".", msgs)
			continue
		}
		msg := fmt.Sprintf("line %d: unknown key %q", k.Line, k.Value)
		if prefix != "" {
			msg += fmt.Sprintf(" (%s)", key)
		}
		if sug := suggestKey(key); sug != "" {
			msg += fmt.Sprintf(": did you mean %s?", sug)
		}
		*msgs = append(*msgs, msg)
	}
}

// decode sets the row's field from a YAML value. A scalar is parsed as the
// environment's and the flags' values are (set), so that the three
// sources accept the same values and refuse them with the same words: a
// fraction for an integer, a number without a unit for a duration. A list
// takes a YAML sequence or a comma-separated scalar. An empty value (key:
// with nothing after it) keeps the current value.
func (s setting) decode(c *Config, v *yaml.Node) error {
	if v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if p, ok := s.field(c).(*[]string); ok && v.Kind == yaml.SequenceNode {
		var items []string
		for _, item := range v.Content {
			if item.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: want a list of values", item.Line)
			}
			if t := strings.TrimSpace(item.Value); t != "" {
				items = append(items, t)
			}
		}
		*p = items
		return nil
	}
	if v.Kind != yaml.ScalarNode {
		if _, ok := s.field(c).(*[]string); ok {
			return errors.New("want a list of values")
		}
		return errors.New("want a single value, not a list or a mapping")
	}
	return s.set(c, v.Value)
}

// isSection reports whether some key lies under section (e.g. "pool").
func isSection(section string) bool {
	for _, s := range settings {
		if strings.HasPrefix(s.key, section+".") {
			return true
		}
	}
	return false
}
