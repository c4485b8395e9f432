package gateway

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/gateway/frontdoor"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/logattr"
	"github.com/gradiopool/gradiopool/pool"
)

// setting is one key of the configuration, declared once: the YAML file,
// the environment, the flags, the usage text, the logged configuration,
// the table of docs/configuration.md and configs/gradiopool.example.yaml are all derived
// from [settings].
type setting struct {
	// key is the YAML path: "pool.max_connections" is max_connections
	// under pool:. Keys of one section are adjacent in the table.
	key string
	// env is the environment variable: GRADIOPOOL_ and the key in upper
	// case, dots as underscores (a test checks the rule). Empty: none.
	env string
	// flag is the flag's name without dashes: the key without "pool.",
	// dots and underscores as dashes. Empty: no flag (e.g. a URL that may
	// carry a password, which every local user would see in ps).
	flag string
	// help says what the key does, in a few words.
	help string
	// unit is the value's unit for the docs; empty means the Go type's
	// name (duration, integer, boolean, ...).
	unit string
	// def is the default as a value of the field's type (untyped
	// constants are converted); nil: the key has none, see defNote.
	def any
	// defNote describes a default that is no value ("the client's").
	defNote string
	// owner is the package that applies def to a zero value ("pool",
	// "frontdoor"); empty: Normalize applies it.
	owner string
	// example is written to the example file for a key without a default.
	example string
	// field returns a pointer to the key's field of c: *string, *[]string,
	// *int, *int64, *float64, *bool, *time.Duration or *pool.Routing.
	field func(c *Config) any
	// public returns what logs show of the value (credentials removed);
	// nil: the value itself.
	public func(v any) any
	// live: a reload (SIGHUP, POST /api/admin/reload) applies a new value
	// in place; the other keys keep their value until a restart.
	live bool
}

// poolDefaults are the pool's effective defaults, read back from package
// pool (which declares them once) rather than named here again.
var poolDefaults = pool.Config{}.WithDefaults()

// settings is every key, in the order of the usage text, docs/configuration.md and
// the example file. Add a key by adding a row (and its field).
var settings = []setting{
	{key: "listen", env: "GRADIOPOOL_LISTEN", flag: "listen", help: "TCP address to listen on",
		def: DefaultListen, field: func(c *Config) any { return &c.Listen }},
	{key: "replicas", env: "GRADIOPOOL_REPLICAS", flag: "replicas", help: "comma-separated Space ids or URLs",
		example: "[owner/app, https://app-2.example]", live: true, field: func(c *Config) any { return &c.Pool.Replicas },
		public: func(v any) any { return publicReplicas(v.([]string)) }},
	{key: "hub_url", env: "GRADIOPOOL_HUB_URL", flag: "hub-url", help: "Hugging Face Hub API base URL",
		defNote: "the client's", field: func(c *Config) any { return &c.HubURL }},

	{key: "pool.min_connections", env: "GRADIOPOOL_POOL_MIN_CONNECTIONS", flag: "min-connections", help: "warm sessions per replica; -1 none",
		def: poolDefaults.MinConnections, owner: "pool", live: true, field: func(c *Config) any { return &c.Pool.MinConnections }},
	{key: "pool.max_connections", env: "GRADIOPOOL_POOL_MAX_CONNECTIONS", flag: "max-connections", help: "max sessions (calls in flight) per replica",
		def: poolDefaults.MaxConnections, owner: "pool", live: true, field: func(c *Config) any { return &c.Pool.MaxConnections }},
	{key: "pool.idle_timeout", env: "GRADIOPOOL_POOL_IDLE_TIMEOUT", flag: "idle-timeout", help: "idle session removed after; negative never",
		def: poolDefaults.IdleTimeout, owner: "pool", live: true, field: func(c *Config) any { return &c.Pool.IdleTimeout }},
	{key: "pool.queue_timeout", env: "GRADIOPOOL_POOL_QUEUE_TIMEOUT", flag: "queue-timeout", help: "max wait for a free session; negative: the caller's deadline",
		def: poolDefaults.QueueTimeout, owner: "pool", live: true, field: func(c *Config) any { return &c.Pool.QueueTimeout }},
	{key: "pool.health_check_interval", env: "GRADIOPOOL_POOL_HEALTH_CHECK_INTERVAL", flag: "health-check-interval", help: "health check period; negative none",
		def: poolDefaults.HealthCheckInterval, owner: "pool", field: func(c *Config) any { return &c.Pool.HealthCheckInterval }},
	{key: "pool.health_check_max_connections", env: "GRADIOPOOL_POOL_HEALTH_CHECK_MAX_CONNECTIONS", flag: "health-check-max-connections", help: "idle sessions checked per round",
		def: poolDefaults.HealthCheckMaxConnections, owner: "pool", field: func(c *Config) any { return &c.Pool.HealthCheckMaxConnections }},
	{key: "pool.unhealthy_after_failures", env: "GRADIOPOOL_POOL_UNHEALTHY_AFTER_FAILURES", flag: "unhealthy-after-failures", help: "failed checks in a row before a session is destroyed",
		def: poolDefaults.UnhealthyAfterFailures, owner: "pool", field: func(c *Config) any { return &c.Pool.UnhealthyAfterFailures }},
	{key: "pool.connect_retries", env: "GRADIOPOOL_POOL_CONNECT_RETRIES", flag: "connect-retries", help: "connect retries before the next replica; negative none",
		def: poolDefaults.ConnectRetries, owner: "pool", field: func(c *Config) any { return &c.Pool.ConnectRetries }},
	{key: "pool.eject_after_refusals", env: "GRADIOPOOL_POOL_EJECT_AFTER_REFUSALS", flag: "eject-after-refusals", help: "refused calls in a row before a replica is ejected; negative never",
		def: poolDefaults.EjectAfterRefusals, owner: "pool", field: func(c *Config) any { return &c.Pool.EjectAfterRefusals }},
	{key: "pool.user_assignment_ttl", env: "GRADIOPOOL_POOL_USER_ASSIGNMENT_TTL", flag: "user-assignment-ttl", help: "user -> replica assignment kept after the last call; negative forever",
		def: poolDefaults.UserAssignmentTTL, owner: "pool", field: func(c *Config) any { return &c.Pool.UserAssignmentTTL }},
	{key: "pool.max_user_assignments", env: "GRADIOPOOL_POOL_MAX_USER_ASSIGNMENTS", flag: "max-user-assignments", help: "users whose assignment (and sticky session) the gateway keeps in memory; a new one past it evicts the least recently used; negative: no bound",
		def: poolDefaults.MaxUserAssignments, owner: "pool", field: func(c *Config) any { return &c.Pool.MaxUserAssignments }},
	{key: "pool.max_waiters", env: "GRADIOPOOL_POOL_MAX_WAITERS", flag: "max-waiters", help: "max callers waiting per replica",
		def: poolDefaults.MaxWaiters, owner: "pool", live: true, field: func(c *Config) any { return &c.Pool.MaxWaiters }},
	{key: "pool.sticky_sessions", env: "GRADIOPOOL_POOL_STICKY_SESSIONS", flag: "sticky-sessions", help: "keep a user on one session (gr.State)",
		def: false, field: func(c *Config) any { return &c.Pool.StickySessions }},
	{key: "pool.priority_max_wait", env: "GRADIOPOOL_POOL_PRIORITY_MAX_WAIT", flag: "priority-max-wait", help: "a waiter of a lower priority class is served after waiting this long; negative strict priority",
		def: poolDefaults.PriorityMaxWait, owner: "pool", field: func(c *Config) any { return &c.Pool.PriorityMaxWait }},
	{key: "pool.routing", env: "GRADIOPOOL_POOL_ROUTING", flag: "routing", help: "anonymous calls: expected_time (the Space's own queue) or least_in_use",
		def: pool.RouteExpectedTime, owner: "pool", field: func(c *Config) any { return &c.Pool.Routing }},
	{key: "pool.rebalance_factor", env: "GRADIOPOOL_POOL_REBALANCE_FACTOR", flag: "rebalance-factor", help: "move a user whose replica is expected this many times slower than the best; 0 never",
		def: 0.0, field: func(c *Config) any { return &c.Pool.RebalanceFactor }},
	{key: "pool.warm_up", env: "GRADIOPOOL_POOL_WARM_UP", flag: "warm-up", help: "open the minimum sessions at start, not at the first call",
		def: false, field: func(c *Config) any { return &c.Pool.WarmUp }},
	{key: "pool.demand_window", env: "GRADIOPOOL_POOL_DEMAND_WINDOW", flag: "demand-window", help: "open sessions ahead of a load rising above its average over this window; 0 off",
		def: time.Duration(0), field: func(c *Config) any { return &c.Pool.DemandWindow }},
	{key: "pool.max_lifetime", env: "GRADIOPOOL_POOL_MAX_LIFETIME", flag: "max-lifetime", help: "retire sessions this old (jittered; replaced ahead while idle, never during a call); 0 never",
		def: time.Duration(0), field: func(c *Config) any { return &c.Pool.MaxLifetime }},
	{key: "pool.idle_disconnect", env: "GRADIOPOOL_POOL_IDLE_DISCONNECT", flag: "idle-disconnect", help: "the Space drops sessions idle this long: replace idle ones before; 0 none",
		def: time.Duration(0), field: func(c *Config) any { return &c.Pool.IdleDisconnect }},
	{key: "pool.wake_sleeping", env: "GRADIOPOOL_POOL_WAKE_SLEEPING", flag: "wake-sleeping", help: "wake a Space found sleeping in the background (calls fail over meanwhile)",
		def: false, field: func(c *Config) any { return &c.Pool.WakeSleeping }},
	{key: "pool.probe_interval", env: "GRADIOPOOL_POOL_PROBE_INTERVAL", flag: "probe-interval", help: "probe unreachable replicas (and ping those with calls in flight) this often, whatever the traffic; negative off",
		def: poolDefaults.ProbeInterval, owner: "pool", field: func(c *Config) any { return &c.Pool.ProbeInterval }},
	{key: "pool.hang_timeout", env: "GRADIOPOOL_POOL_HANG_TIMEOUT", flag: "hang-timeout", help: "a replica leaving a join or a ping unanswered this long is suspect: new calls go elsewhere; negative off",
		def: poolDefaults.HangTimeout, owner: "pool", field: func(c *Config) any { return &c.Pool.HangTimeout }},
	{key: "pool.liveness_interval", env: "GRADIOPOOL_POOL_LIVENESS_INTERVAL", flag: "liveness-interval", help: "TCP-connect each connected replica this often (no request: cannot wake a Space) to see one that died while idle; negative off",
		def: poolDefaults.LivenessInterval, owner: "pool", field: func(c *Config) any { return &c.Pool.LivenessInterval }},
	{key: "upstream_keep_alive", env: "GRADIOPOOL_UPSTREAM_KEEP_ALIVE", flag: "upstream-keep-alive", help: "close idle connections to a replica after this; below its server's keep-alive (uvicorn 5s); negative no reuse",
		def: gradio.DefaultKeepAlive, owner: "gradio", field: func(c *Config) any { return &c.UpstreamKeepAlive }},
	{key: "upstream_event_bytes", env: "GRADIOPOOL_UPSTREAM_EVENT_BYTES", flag: "upstream-event-bytes", help: "bytes of the replicas' events read in part that the gateway holds in total, beyond 64 KiB per stream (one event: at most 64 MiB), shared fairly by the replicas, each replica's share by its callers; large outputs not yet delivered and a slow /v1/submit reader's waiting outputs count too, charged to their caller; past it the party most over its share loses its largest stream: 502 as the replica's fault, 429 event_share as a caller's that runs more streams there than its others or keeps more in undelivered outputs than its streams read; negative: no limit", unit: "bytes",
		def: int64(gradio.DefaultEventBudgetBytes), field: func(c *Config) any { return &c.UpstreamEventBytes }},

	{key: "max_body_bytes", env: "GRADIOPOOL_MAX_BODY_BYTES", flag: "max-body-bytes", help: "max request body in bytes", unit: "bytes",
		def: defaultMaxBodyBytes, field: func(c *Config) any { return &c.MaxBodyBytes }},
	{key: "drain_timeout", env: "GRADIOPOOL_DRAIN_TIMEOUT", flag: "drain-timeout", help: "on SIGTERM, time calls in flight may take",
		def: DefaultDrainTimeout, field: func(c *Config) any { return &c.DrainTimeout }},
	{key: "keepalive_interval", env: "GRADIOPOOL_KEEPALIVE_INTERVAL", flag: "keepalive-interval", help: "keep-alive comment period on event streams",
		def: defaultKeepAlive, field: func(c *Config) any { return &c.KeepAliveInterval }},
	{key: "pending_call_ttl", env: "GRADIOPOOL_PENDING_CALL_TTL", flag: "pending-call-ttl", help: "how long an unread /gradio_api/call result is kept after its call ended (a result read to its end is freed at once)",
		def: defaultPendingCallTTL, field: func(c *Config) any { return &c.PendingCallTTL }},
	{key: "max_pending_calls", env: "GRADIOPOOL_MAX_PENDING_CALLS", flag: "max-pending-calls", help: "max /gradio_api/call results kept",
		def: defaultMaxPendingCalls, field: func(c *Config) any { return &c.MaxPendingCalls }},
	{key: "max_pending_calls_per_client", env: "GRADIOPOOL_MAX_PENDING_CALLS_PER_CLIENT", flag: "max-pending-calls-per-client", help: "/gradio_api/call results one client (API key, else address) may have kept; more are answered 429; negative: no limit",
		def: defaultMaxPendingCallsPerClient, field: func(c *Config) any { return &c.MaxPendingCallsPerClient }},
	{key: "max_pending_result_bytes", env: "GRADIOPOOL_MAX_PENDING_RESULT_BYTES", flag: "max-pending-result-bytes", help: "output one /gradio_api/call call keeps unread; past it the call is stopped (result_too_large); negative: no limit", unit: "bytes",
		def: int64(defaultMaxPendingResultBytes), field: func(c *Config) any { return &c.MaxPendingResultBytes }},
	{key: "max_pending_bytes", env: "GRADIOPOOL_MAX_PENDING_BYTES", flag: "max-pending-bytes", help: "output every /gradio_api/call call keeps unread, in total; past it calls are stopped (result_too_large); negative: no limit", unit: "bytes",
		def: int64(defaultMaxPendingBytes), field: func(c *Config) any { return &c.MaxPendingBytes }},
	{key: "max_client_connections", env: "GRADIOPOOL_MAX_CLIENT_CONNECTIONS", flag: "max-client-connections", help: "client connections open at once; more wait to be accepted; negative: no limit",
		def: defaultMaxClientConnections, field: func(c *Config) any { return &c.MaxClientConnections }},
	{key: "max_client_connections_per_address", env: "GRADIOPOOL_MAX_CLIENT_CONNECTIONS_PER_ADDRESS", flag: "max-client-connections-per-address", help: "client connections one address may hold open; more are answered 429; negative: no limit",
		def: defaultMaxClientConnectionsPerAddress, field: func(c *Config) any { return &c.MaxClientConnectionsPerAddress }},
	{key: "max_calls_per_client", env: "GRADIOPOOL_MAX_CALLS_PER_CLIENT", flag: "max-calls-per-client", help: "calls one client (API key, else address) may have in flight, waiting or running; more are answered 429; 0: half of replicas x max_connections, for each key when two or more API keys are set, else for each address but loopback ones (one key, or a web app on the gateway's host: no limit); negative: no limit",
		def: 0, field: func(c *Config) any { return &c.MaxCallsPerClient }},
	{key: "max_calls_per_user", env: "GRADIOPOOL_MAX_CALLS_PER_USER", flag: "max-calls-per-user", help: "calls one user (X-Gradiopool-User, within one client) may have in flight; more are answered 429, so that one user of a web app holding the gateway's key cannot take every slot; 0: a quarter of replicas x max_connections, at least 8; negative: no limit",
		def: 0, field: func(c *Config) any { return &c.MaxCallsPerUser }},
	{key: "trusted_proxies", env: "GRADIOPOOL_TRUSTED_PROXIES", flag: "trusted-proxies", help: "comma-separated CIDRs (or addresses) of reverse proxies: from these peers only, the client's address is taken from X-Forwarded-For (else Forwarded), the nearest untrusted hop; none: the peer's address",
		example: "[127.0.0.1/32, 10.0.0.0/8]", field: func(c *Config) any { return &c.TrustedProxies }},

	{key: "log.format", env: "GRADIOPOOL_LOG_FORMAT", flag: "log-format", help: "auto, json or text",
		def: "auto", field: func(c *Config) any { return &c.Log.Format }},
	{key: "log.level", env: "GRADIOPOOL_LOG_LEVEL", flag: "log-level", help: "debug, info, warn or error",
		def: "info", field: func(c *Config) any { return &c.Log.Level }},

	{key: "frontdoor.disabled", env: "GRADIOPOOL_FRONTDOOR_DISABLED", flag: "frontdoor-disabled", help: "turn the Gradio front door off",
		def: false, field: func(c *Config) any { return &c.FrontDoor.Disabled }},
	{key: "frontdoor.session_ttl", env: "GRADIOPOOL_FRONTDOOR_SESSION_TTL", flag: "frontdoor-session-ttl", help: "front-door session kept after its last request when no stream is open",
		def: frontdoor.DefaultSessionTTL, owner: "frontdoor", live: true, field: func(c *Config) any { return &c.FrontDoor.SessionTTL }},
	{key: "frontdoor.upload_dir", env: "GRADIOPOOL_FRONTDOOR_UPLOAD_DIR", flag: "frontdoor-upload-dir", help: "where front-door uploads wait for their join",
		defNote: "a temporary directory", field: func(c *Config) any { return &c.FrontDoor.UploadDir }},
	{key: "frontdoor.trust_forwarded_headers", env: "GRADIOPOOL_FRONTDOOR_TRUST_FORWARDED_HEADERS", flag: "frontdoor-trust-forwarded-headers", help: "front-door root URL from X-Forwarded-Proto/Host",
		def: false, field: func(c *Config) any { return &c.FrontDoor.TrustForwardedHeaders }},
	{key: "frontdoor.public_url", env: "GRADIOPOOL_FRONTDOOR_PUBLIC_URL", flag: "frontdoor-public-url", help: "the gateway's URL as callers reach it, announced as the app's root (a Host header is reflected only when it is the listen address or a loopback name)",
		defNote: "the listen address", example: "https://gradio.example.com", field: func(c *Config) any { return &c.FrontDoor.PublicURL }},
	{key: "frontdoor.forward_caller_token", env: "GRADIOPOOL_FRONTDOOR_FORWARD_CALLER_TOKEN", flag: "frontdoor-forward-caller-token", help: "send the caller's HF token and X-IP-Token to the Spaces",
		def: false, field: func(c *Config) any { return &c.FrontDoor.ForwardCallerToken }},
	{key: "frontdoor.show_replica_errors", env: "GRADIOPOOL_FRONTDOOR_SHOW_REPLICA_ERRORS", flag: "frontdoor-show-replica-errors", help: "show callers the replicas' error answers (tracebacks) and names",
		def: false, live: true, field: func(c *Config) any { return &c.FrontDoor.ShowReplicaErrors }},
	{key: "frontdoor.read_grace", env: "GRADIOPOOL_FRONTDOOR_READ_GRACE", flag: "frontdoor-read-grace", help: "an accepted call whose caller opens no queue/data stream within this is cancelled and its slot freed; negative never",
		def: frontdoor.DefaultReadGrace, owner: "frontdoor", live: true, field: func(c *Config) any { return &c.FrontDoor.ReadGrace }},
	{key: "frontdoor.max_sessions", env: "GRADIOPOOL_FRONTDOOR_MAX_SESSIONS", flag: "frontdoor-max-sessions", help: "front-door sessions kept in total; a new one past it is answered 503; negative: no limit",
		def: frontdoor.DefaultMaxSessions, owner: "frontdoor", live: true, field: func(c *Config) any { return &c.FrontDoor.MaxSessions }},
	{key: "frontdoor.max_sessions_per_client", env: "GRADIOPOOL_FRONTDOOR_MAX_SESSIONS_PER_CLIENT", flag: "frontdoor-max-sessions-per-client", help: "front-door sessions of one client (API key, else address); a new one past it is answered 429; negative: no limit",
		def: frontdoor.DefaultMaxSessionsPerClient, owner: "frontdoor", live: true, field: func(c *Config) any { return &c.FrontDoor.MaxSessionsPerClient }},
	{key: "frontdoor.max_file_bytes", env: "GRADIOPOOL_FRONTDOOR_MAX_FILE_BYTES", flag: "frontdoor-max-file-bytes", help: "bytes of one uploaded file; more are answered 413; negative: no limit", unit: "bytes",
		defNote: "the app's max_file_size, else max_body_bytes", owner: "frontdoor", live: true, field: func(c *Config) any { return &c.FrontDoor.MaxFileBytes }},
	{key: "frontdoor.max_files_per_upload", env: "GRADIOPOOL_FRONTDOOR_MAX_FILES_PER_UPLOAD", flag: "frontdoor-max-files-per-upload", help: "parts of one upload request; more are answered 413; negative: no limit",
		def: frontdoor.DefaultMaxFilesPerUpload, owner: "frontdoor", live: true, field: func(c *Config) any { return &c.FrontDoor.MaxFilesPerUpload }},
	{key: "frontdoor.max_upload_bytes_per_client", env: "GRADIOPOOL_FRONTDOOR_MAX_UPLOAD_BYTES_PER_CLIENT", flag: "frontdoor-max-upload-bytes-per-client", help: "upload bytes one client (API key, else address) keeps on disk; more are answered 429; negative: no limit", unit: "bytes",
		def: int64(frontdoor.DefaultMaxUploadBytesPerClient), owner: "frontdoor", live: true, field: func(c *Config) any { return &c.FrontDoor.MaxUploadBytesPerClient }},
	{key: "frontdoor.max_upload_bytes", env: "GRADIOPOOL_FRONTDOOR_MAX_UPLOAD_BYTES", flag: "frontdoor-max-upload-bytes", help: "upload bytes kept on disk in total; more are answered 503; negative: no limit", unit: "bytes",
		def: int64(frontdoor.DefaultMaxUploadBytes), owner: "frontdoor", live: true, field: func(c *Config) any { return &c.FrontDoor.MaxUploadBytes }},
	{key: "frontdoor.upload_ttl", env: "GRADIOPOOL_FRONTDOOR_UPLOAD_TTL", flag: "frontdoor-upload-ttl", help: "an upload is removed this long after it arrived",
		def: frontdoor.DefaultUploadTTL, owner: "frontdoor", live: true, field: func(c *Config) any { return &c.FrontDoor.UploadTTL }},
	{key: "frontdoor.file_url_ttl", env: "GRADIOPOOL_FRONTDOOR_FILE_URL_TTL", flag: "frontdoor-file-url-ttl", help: "how long a signed file URL (an output file) can be used; negative for ever",
		def: frontdoor.DefaultFileURLTTL, owner: "frontdoor", live: true, field: func(c *Config) any { return &c.FrontDoor.FileURLTTL }},
	{key: "frontdoor.pin_sessions", env: "GRADIOPOOL_FRONTDOOR_PIN_SESSIONS", flag: "frontdoor-pin-sessions", help: "run every call of a front-door session on its replica (off: calls to endpoints without gr.State go to the least loaded replica each)",
		def: false, live: true, field: func(c *Config) any { return &c.FrontDoor.PinSessions }},
	{key: "frontdoor.pinned_endpoints", env: "GRADIOPOOL_FRONTDOOR_PINNED_ENDPOINTS", flag: "frontdoor-pinned-endpoints", help: "comma-separated api names (or #fn_index) whose front-door calls always run on the session's replica (apps keeping state by session hash outside gr.State)",
		example: "[/chat, \"#3\"]", live: true, field: func(c *Config) any { return &c.FrontDoor.PinnedEndpoints }},

	// cluster.redis_url has no flag (a password on a command line is seen
	// by every local user) and GRADIOPOOL_REDIS_URL, a secret, wins over it.
	{key: "cluster.redis_url", help: "redis:// or rediss:// URL without a password: several gateways as one (GRADIOPOOL_REDIS_URL wins)",
		defNote: "no cluster", field: func(c *Config) any { return &c.Cluster.RedisURL }, public: publicRedisURL},
	{key: "cluster.advertise_url", env: "GRADIOPOOL_CLUSTER_ADVERTISE_URL", flag: "cluster-advertise-url", help: "the URL the other gateways reach this one at (requests of the sessions it owns are forwarded there); in Kubernetes the pod's address",
		defNote: "http:// and the listen address, or this host's first non-loopback address when it listens on all", field: func(c *Config) any { return &c.Cluster.AdvertiseURL }},
	{key: "cluster.lease_ttl", env: "GRADIOPOOL_CLUSTER_LEASE_TTL", flag: "cluster-lease-ttl", help: "a dead gateway's leases (its share of the limits) are free again within",
		def: defaultClusterLeaseTTL, field: func(c *Config) any { return &c.Cluster.LeaseTTL }},
	{key: "cluster.name", env: "GRADIOPOOL_CLUSTER_NAME", flag: "cluster-name", help: "Redis key prefix, so that deployments can share one Redis",
		def: defaultClusterName, field: func(c *Config) any { return &c.Cluster.Name }},
	{key: "cluster.on_redis_loss", env: "GRADIOPOOL_CLUSTER_ON_REDIS_LOSS", flag: "cluster-on-redis-loss", help: "while Redis is lost: fail_open (serve on local shares) or fail_closed (refuse new calls)",
		def: "fail_open", field: func(c *Config) any { return &c.Cluster.OnRedisLoss }},
	{key: "cluster.gateways", env: "GRADIOPOOL_CLUSTER_GATEWAYS", flag: "cluster-gateways", help: "gateways that may run at once: the local share divides each limit by at least this many (0: by those last seen)",
		def: 0, field: func(c *Config) any { return &c.Cluster.Gateways }},
	{key: "cluster.start_degraded", env: "GRADIOPOOL_CLUSTER_START_DEGRADED", flag: "cluster-start-degraded", help: "start while Redis does not answer (needs cluster.gateways) and join when it does",
		def: false, field: func(c *Config) any { return &c.Cluster.StartDegraded }},
	{key: "cluster.redis_wait_replicas", env: "GRADIOPOOL_CLUSTER_REDIS_WAIT_REPLICAS", flag: "cluster-redis-wait-replicas", help: "replicas that must acknowledge a grant (WAIT) so that a failover cannot lose it; 0: 1 for Sentinel and Cluster URLs, none standalone; -1 none",
		def: 0, field: func(c *Config) any { return &c.Cluster.WaitReplicas }},
	{key: "cluster.redis_tls_ca_file", env: "GRADIOPOOL_CLUSTER_REDIS_TLS_CA_FILE", flag: "cluster-redis-tls-ca-file", help: "PEM certificate authorities to trust for rediss:// (empty: the system's)",
		field: func(c *Config) any { return &c.Cluster.TLSCAFile }},
	{key: "cluster.redis_tls_cert_file", env: "GRADIOPOOL_CLUSTER_REDIS_TLS_CERT_FILE", flag: "cluster-redis-tls-cert-file", help: "PEM client certificate for rediss:// servers that ask for one",
		field: func(c *Config) any { return &c.Cluster.TLSCertFile }},
	{key: "cluster.redis_tls_key_file", env: "GRADIOPOOL_CLUSTER_REDIS_TLS_KEY_FILE", flag: "cluster-redis-tls-key-file", help: "PEM key of the client certificate",
		field: func(c *Config) any { return &c.Cluster.TLSKeyFile }},
	{key: "cluster.redis_tls_insecure_skip_verify", env: "GRADIOPOOL_CLUSTER_REDIS_TLS_INSECURE_SKIP_VERIFY", flag: "cluster-redis-tls-insecure-skip-verify", help: "accept any Redis server certificate (tests only)",
		def: false, field: func(c *Config) any { return &c.Cluster.TLSInsecureSkipVerify }},

	{key: "autoscale.mode", env: "GRADIOPOOL_AUTOSCALE_MODE", flag: "autoscale-mode", help: "off, dry_run (decide and log, change nothing) or on: pause replicas' Spaces not needed and wake them ahead of demand (HF_TOKEN must be the Spaces' owner's, with write access; docs/autoscale.md)",
		def: "off", field: func(c *Config) any { return &c.Autoscale.Mode }},
	{key: "autoscale.min_awake", env: "GRADIOPOOL_AUTOSCALE_MIN_AWAKE", flag: "autoscale-min-awake", help: "replicas always kept awake; -1: none (the first caller after a quiet time waits a whole wake)",
		def: 1, field: func(c *Config) any { return &c.Autoscale.MinAwake }},
	{key: "autoscale.park_after", env: "GRADIOPOOL_AUTOSCALE_PARK_AFTER", flag: "autoscale-park-after", help: "a replica not needed this long (and at least 3x its measured wake time) is drained and paused",
		def: 15 * time.Minute, field: func(c *Config) any { return &c.Autoscale.ParkAfter }},
	{key: "autoscale.min_awake_after_wake", env: "GRADIOPOOL_AUTOSCALE_MIN_AWAKE_AFTER_WAKE", flag: "autoscale-min-awake-after-wake", help: "a woken replica stays awake at least this long",
		def: 10 * time.Minute, field: func(c *Config) any { return &c.Autoscale.MinAwakeAfterWake }},
	{key: "autoscale.max_actions_per_hour", env: "GRADIOPOOL_AUTOSCALE_MAX_ACTIONS_PER_HOUR", flag: "autoscale-max-actions-per-hour", help: "pauses and wakes per replica per hour at most (flap budget)",
		def: 4, field: func(c *Config) any { return &c.Autoscale.MaxActionsPerHour }},
	{key: "autoscale.max_actions_per_day", env: "GRADIOPOOL_AUTOSCALE_MAX_ACTIONS_PER_DAY", flag: "autoscale-max-actions-per-day", help: "pauses and wakes per replica per day at most (flap budget)",
		def: 24, field: func(c *Config) any { return &c.Autoscale.MaxActionsPerDay }},
	{key: "autoscale.hub_call_budget", env: "GRADIOPOOL_AUTOSCALE_HUB_CALL_BUDGET", flag: "autoscale-hub-call-budget", help: "Hub API calls the policy makes per 5 minutes at most (the Hub allows a free account 1000, shared with everything else using the token)",
		def: 300, field: func(c *Config) any { return &c.Autoscale.HubCallBudget }},
	{key: "autoscale.interval", env: "GRADIOPOOL_AUTOSCALE_INTERVAL", flag: "autoscale-interval", help: "how often the policy reads demand and decides",
		def: 5 * time.Second, field: func(c *Config) any { return &c.Autoscale.Interval }},
	{key: "autoscale.wake_timeout", env: "GRADIOPOOL_AUTOSCALE_WAKE_TIMEOUT", flag: "autoscale-wake-timeout", help: "a call finding every replica paused waits this long for a wake, then gets 503 with Retry-After",
		def: 5 * time.Minute, field: func(c *Config) any { return &c.Autoscale.WakeTimeout }},
	{key: "autoscale.park_lever", env: "GRADIOPOOL_AUTOSCALE_PARK_LEVER", flag: "autoscale-park-lever", help: "how a replica not needed is parked: pause (its Space is paused; only a restart wakes it, through a build) or sleep (a short sleep time, autoscale.sleep_time: the Space stops itself once idle, is back at once if needed before that, and wakes on a visit without a build; billed until it stops)",
		def: "pause", field: func(c *Config) any { return &c.Autoscale.ParkLever }},
	{key: "autoscale.sleep_time", env: "GRADIOPOOL_AUTOSCALE_SLEEP_TIME", flag: "autoscale-sleep-time", help: "the sleep time the sleep lever sets on a parked replica's Space",
		def: time.Minute, field: func(c *Config) any { return &c.Autoscale.SleepTime }},
}

// settingByKey finds a row; nil when key is none.
func settingByKey(key string) *setting {
	for i := range settings {
		if settings[i].key == key {
			return &settings[i]
		}
	}
	return nil
}

// ptr returns the reflect value the row's field points at.
func (s setting) ptr(c *Config) reflect.Value { return reflect.ValueOf(s.field(c)).Elem() }

// set parses v (from the environment or a flag) into the row's field.
func (s setting) set(c *Config, v string) error {
	v = strings.TrimSpace(v)
	switch p := s.field(c).(type) {
	case *string:
		*p = v
	case *pool.Routing:
		*p = pool.Routing(v)
	case *[]string:
		*p = splitList(v)
	case *int:
		n, err := strconv.Atoi(v)
		if err != nil {
			return notInteger(v)
		}
		*p = n
	case *int64:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return notInteger(v)
		}
		*p = n
	case *float64:
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		*p = x
	case *bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not a boolean", v)
		}
		*p = b
	case *time.Duration:
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 30s, 10m, 1h)", v)
		}
		*p = d
	default:
		panic(fmt.Sprintf("gateway: setting %s: field of type %T", s.key, p))
	}
	return nil
}

// notInteger says why v is no integer: a fraction is named as such (it
// was once truncated without a word), a number out of range too.
func notInteger(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f != float64(int64(f)) {
			return fmt.Errorf("%q is a fraction: want a whole number", v)
		}
		return fmt.Errorf("%q: want a whole number written as digits", v)
	}
	return fmt.Errorf("%q is not an integer", v)
}

// applyDefault sets the row's default on a zero field, for the rows whose
// default the gateway owns.
func (s setting) applyDefault(c *Config) {
	if s.owner != "" || s.def == nil {
		return
	}
	if f := s.ptr(c); f.IsZero() {
		f.Set(reflect.ValueOf(s.def).Convert(f.Type()))
	}
}

// attr is the row's value as logs show it, under name: durations in
// milliseconds under name_ms (logattr.Ms), like every duration logged.
func (s setting) attr(c *Config, name string) slog.Attr {
	v := s.value(c)
	if d, ok := v.(time.Duration); ok {
		return logattr.Ms(name, d)
	}
	return slog.Any(name, v)
}

// value is the row's current value as logs show it.
func (s setting) value(c *Config) any {
	v := s.ptr(c).Interface()
	if s.owner != "" && s.def != nil && s.ptr(c).IsZero() {
		v = reflect.ValueOf(s.def).Convert(s.ptr(c).Type()).Interface() // what the owner applies
	}
	if s.public != nil {
		v = s.public(v)
	}
	return v
}

// unitName is the row's unit, or its type's name.
func (s setting) unitName() string {
	if s.unit != "" {
		return s.unit
	}
	switch s.field(&Config{}).(type) {
	case *time.Duration:
		return "duration"
	case *int, *int64:
		return "integer"
	case *float64:
		return "number"
	case *bool:
		return "boolean"
	case *[]string:
		return "list"
	}
	return "string"
}

// usageText is a setting's help with its default, e.g.
// "max sessions (calls in flight) per replica (default 50)".
func (s setting) usageText() string {
	if d := s.defaultText(); d != "" {
		return fmt.Sprintf("%s (default %s)", s.help, d)
	}
	return s.help
}

// defaultText is the default as the docs show it; "" when none.
func (s setting) defaultText() string {
	if s.def == nil {
		return s.defNote
	}
	return formatValue(s.def)
}

// formatValue writes a value the way it is configured: durations as "10m",
// not "10m0s"; lists comma-separated.
func formatValue(v any) string {
	switch x := v.(type) {
	case time.Duration:
		out := x.String()
		if strings.HasSuffix(out, "m0s") {
			out = strings.TrimSuffix(out, "0s")
		}
		if strings.HasSuffix(out, "h0m") {
			out = strings.TrimSuffix(out, "0m")
		}
		return out
	case []string:
		return strings.Join(x, ",")
	}
	return fmt.Sprint(v)
}

// splitKeys splits API keys separated by commas or new lines (a keys
// file holds one per line; lines starting with # are comments).
func splitKeys(v string) []string {
	var out []string
	for line := range strings.SplitSeq(v, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		out = append(out, splitList(line)...)
	}
	return out
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

// publicRedisURL logs a Redis URL only as scheme and host.
func publicRedisURL(v any) any {
	if u, err := url.Parse(v.(string)); err == nil && u.Host != "" {
		return u.Scheme + "://" + u.Host
	}
	return "unset"
}

// Normalize applies the defaults of the gateway's keys and, through
// [pool.Config.WithDefaults], of the pool's, so that the effective values
// are readable in c (and logged). It runs once: [Open] and [New] skip a
// Config already normalized.
func (c *Config) Normalize() {
	if c.normalized {
		return
	}
	c.Pool = c.Pool.WithDefaults()
	for _, s := range settings {
		s.applyDefault(c)
	}
	c.normalized = true
}

// LogValue is the configuration as logged at start-up: every key of the
// table, grouped by section, credentials and secrets redacted.
func (c Config) LogValue() slog.Value {
	var top []slog.Attr
	var sections []string
	groups := map[string][]any{}
	for _, s := range settings {
		section, leaf, nested := strings.Cut(s.key, ".")
		if !nested {
			top = append(top, s.attr(&c, s.key))
			continue
		}
		if _, ok := groups[section]; !ok {
			sections = append(sections, section)
		}
		groups[section] = append(groups[section], s.attr(&c, leaf))
	}
	for _, sec := range sections {
		top = append(top, slog.Group(sec, groups[sec]...))
	}
	return slog.GroupValue(append(top, slog.Any("secrets", c.Secrets))...)
}

// String is the configuration in one line, secrets redacted.
func (c Config) String() string {
	var b strings.Builder
	for _, s := range settings {
		fmt.Fprintf(&b, "%s=%s ", s.key, formatValue(s.value(&c)))
	}
	b.WriteString(c.Secrets.String())
	return b.String()
}

// ConfigEnvFile is the environment variable naming the YAML file when no
// --config flag is given.
const ConfigEnvFile = "GRADIOPOOL_CONFIG"

// ApplyEnv sets every key whose environment variable is non-empty, and
// reads the secrets. lookup is os.LookupEnv or a test's map.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	var errs []error
	for _, s := range settings {
		if s.env == "" {
			continue
		}
		if v, ok := lookup(s.env); ok && v != "" {
			if err := s.set(c, v); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", s.env, s.key, err))
			}
		}
	}
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	// The admin token and the API keys may come from a file instead
	// (GRADIOPOOL_ADMIN_TOKEN_FILE, GRADIOPOOL_API_KEYS_FILE: a mounted
	// secret), which a reload reads again: rotating them needs no restart.
	fromFile := func(k string) string {
		path := get(k + "_FILE")
		if path == "" {
			return get(k)
		}
		if get(k) != "" {
			errs = append(errs, fmt.Errorf("%s and %s_FILE are both set: set one", k, k))
			return ""
		}
		b, err := os.ReadFile(path)
		if err != nil {
			// The path is not secret; the file's content never appears.
			errs = append(errs, fmt.Errorf("%s_FILE: %w", k, err))
			return ""
		}
		return string(b)
	}
	c.Secrets = Secrets{
		HFToken:    get("HF_TOKEN"),
		AdminToken: strings.TrimSpace(fromFile("GRADIOPOOL_ADMIN_TOKEN")),
		APIKeys:    splitKeys(fromFile("GRADIOPOOL_API_KEYS")),
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
		if s.flag == "" {
			continue
		}
		usage := s.usageText() + " [key " + s.key + ", env " + s.env + "]"
		switch s.field(&Config{}).(type) {
		case *int:
			fs.Int(s.flag, 0, usage)
		case *int64:
			fs.Int64(s.flag, 0, usage)
		case *float64:
			fs.Float64(s.flag, 0, usage)
		case *time.Duration:
			fs.Duration(s.flag, 0, usage)
		case *bool:
			fs.Bool(s.flag, false, usage)
		default:
			fs.String(s.flag, "", usage)
		}
	}
	return func(c *Config) error {
		var errs []error
		fs.Visit(func(f *flag.Flag) {
			for _, s := range settings {
				if s.flag != "" && s.flag == f.Name {
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
	// Key is the YAML path ("pool.max_connections"); Env its environment
	// variable; Flag its flag with dashes, "" when it has none.
	Key, Env, Flag string
	// Unit is what the value is: duration, integer, bytes, boolean, ...
	Unit string
	// Usage says what the key does.
	Usage string
	// Default is the default as the docs show it; "" when none.
	Default string
	// Example is the value the example configuration writes; "" means the
	// key is written there commented out.
	Example string
}

// Settings lists every key, in the order of the usage text: the source of
// docs/configuration.md's table and of configs/gradiopool.example.yaml
// (tests check that both match it).
func Settings() []Setting {
	out := make([]Setting, len(settings))
	for i, s := range settings {
		out[i] = Setting{Key: s.key, Env: s.env, Unit: s.unitName(), Usage: s.help, Default: s.defaultText(), Example: s.example}
		if s.flag != "" {
			out[i].Flag = "--" + s.flag
		}
		if s.def != nil {
			out[i].Example = formatValue(s.def)
		}
		if s.live {
			out[i].Usage += " (a reload applies it live)"
		}
	}
	return out
}
