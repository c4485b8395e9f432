package cluster

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gradiopool/gradiopool/pool"
)

// Defaults for zero fields of [Config].
const (
	// DefaultName is the key prefix of a deployment.
	DefaultName = "gradiopool"
	// DefaultLeaseTTL is how long a lease (and a gateway's heartbeat, its
	// place in a queue, its published stats) lives without a refresh. A
	// dead gateway's slots are free again within it; live gateways refresh
	// every third of it.
	DefaultLeaseTTL = 15 * time.Second
	// DefaultMaxWaiters bounds each replica's local waiter list.
	DefaultMaxWaiters = 1000
	// DefaultPollInterval is the longest a gateway waits between two tries
	// while its callers wait; releases wake it earlier (PUBLISH).
	DefaultPollInterval = 100 * time.Millisecond
	// MinLeaseTTL is the smallest LeaseTTL accepted.
	MinLeaseTTL = 100 * time.Millisecond
)

// Config configures [New].
type Config struct {
	// Client is the connection to Redis (redis.NewClient, or a failover
	// or cluster client). Required; the Coordinator does not close it.
	Client redis.UniversalClient
	// Name prefixes every key ("{name}:..."), so that two deployments
	// can share one Redis. Empty means DefaultName. Letters, digits and
	// "-_." only.
	Name string
	// LeaseTTL: see DefaultLeaseTTL. Zero means the default; at least
	// MinLeaseTTL.
	LeaseTTL time.Duration
	// Limit is each replica's limit on calls in flight across every
	// gateway (max_connections). Required (at least 1).
	Limit int
	// Replicas are the replica names (pool.Pool.Replicas); others are
	// added on first use. Knowing them up front lets a gateway that
	// rejoins after a Redis outage reserve every replica's share of the
	// gateways that have not rejoined yet.
	Replicas []string
	// MaxWaiters bounds each replica's local waiter list (beyond it
	// Acquire fails with pool.ErrQueueFull). Zero means DefaultMaxWaiters;
	// negative means unbounded.
	MaxWaiters int
	// PollInterval: see DefaultPollInterval. Zero means the default;
	// capped at a third of LeaseTTL.
	PollInterval time.Duration
	// PriorityMaxWait is the starvation bound of the priority classes of
	// the local waiter lists (pool.CallOptions.Priority): a waiter of a lower class
	// goes first once it has waited this long. Zero means
	// the pool's default (10 s); negative means strict classes.
	PriorityMaxWait time.Duration
	// LocalStats, if set, returns this gateway's sessions per replica for
	// the published statistics (cluster scope). Called from the
	// Coordinator's own goroutine every LeaseTTL/3.
	LocalStats func() map[string]LocalReplica
	// Logger receives the Coordinator's logs (Redis lost and back). Nil
	// logs nothing.
	Logger *slog.Logger
	// GatewayID names this gateway in Redis and in the cluster stats.
	// Empty means a random "gw-" id; hex digits, letters and "-_." only.
	GatewayID string
	// OnRedisLoss is what a gateway does while it cannot reach Redis:
	// FailOpen (the zero value) serves on local shares, FailClosed
	// refuses new calls (ErrRedisDown) until Redis answers again.
	OnRedisLoss LossPolicy
	// Gateways is how many gateways may run at once: while Redis is lost
	// the local share divides the limit by at least this many, whatever
	// this gateway last saw. Zero: by the gateways last seen alive only.
	Gateways int
	// StartDegraded lets New start while Redis does not answer (on local
	// shares, or refusing calls with FailClosed); the gateway joins when
	// Redis answers. It needs Gateways, since such a gateway has seen no
	// membership. Without it New fails when Redis does not answer.
	// Misconfigurations (wrong topology, missing ACL permissions) fail
	// New either way.
	StartDegraded bool
	// WaitReplicas is how many replicas must acknowledge a grant (WAIT,
	// pipelined with the acquire script: no extra round trip) before it
	// is used. Redis replicates asynchronously: in a Sentinel or Cluster
	// failover the old primary's last writes are lost, and a lost grant
	// would let the other gateways exceed the limit. 0 (standalone):
	// no wait; 1 for a primary with replicas (NewClient's Sentinel and
	// Cluster topologies). A primary with fewer replicas fails New.
	WaitReplicas int
}

// LossPolicy is what a gateway does while Redis is lost.
type LossPolicy int

const (
	// FailOpen serves on local shares of each limit.
	FailOpen LossPolicy = iota
	// FailClosed refuses new calls until Redis answers again.
	FailClosed
)

func (p LossPolicy) String() string {
	if p == FailClosed {
		return "fail_closed"
	}
	return "fail_open"
}

// ParseLossPolicy parses "fail_open" ("" too) and "fail_closed".
func ParseLossPolicy(s string) (LossPolicy, error) {
	switch s {
	case "", "fail_open":
		return FailOpen, nil
	case "fail_closed":
		return FailClosed, nil
	}
	return FailOpen, fmt.Errorf("cluster: on Redis loss %q: want fail_open or fail_closed", s)
}

// LocalReplica is one replica's sessions in one gateway.
type LocalReplica struct {
	Sessions int `json:"sessions"` // sessions open (idle + in use + connecting)
	InUse    int `json:"inUse"`    // sessions lent to calls
	Waiting  int `json:"waiting"`  // callers waiting for a session or a lease
}

type settings struct {
	Config
	pollInterval time.Duration
	placeTTL     time.Duration // a waiting gateway's place in a queue lapses after it
	opTimeout    time.Duration
	tick         time.Duration
}

func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.", r)) {
			return false
		}
	}
	return s != ""
}

func (c Config) withDefaults() (settings, error) {
	s := settings{Config: c}
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("cluster: Config.Client is nil"))
	}
	s.Name = cmp.Or(c.Name, DefaultName)
	if !validName(s.Name) {
		errs = append(errs, fmt.Errorf("cluster: name %q: use letters, digits and -_. only", s.Name))
	}
	if c.GatewayID != "" && !validName(c.GatewayID) {
		errs = append(errs, fmt.Errorf("cluster: gateway id %q: use letters, digits and -_. only", c.GatewayID))
	}
	s.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	if s.LeaseTTL < MinLeaseTTL {
		errs = append(errs, fmt.Errorf("cluster: lease TTL %v is below %v", s.LeaseTTL, MinLeaseTTL))
	}
	if c.Limit < 1 {
		errs = append(errs, fmt.Errorf("cluster: limit %d, must be at least 1", c.Limit))
	}
	if c.Gateways < 0 {
		errs = append(errs, fmt.Errorf("cluster: gateways %d, must not be negative", c.Gateways))
	}
	if c.StartDegraded && c.Gateways < 1 {
		errs = append(errs, errors.New("cluster: starting without Redis needs the number of gateways (Config.Gateways): a gateway that never saw the others cannot compute its share"))
	}
	if c.WaitReplicas < 0 {
		errs = append(errs, fmt.Errorf("cluster: wait replicas %d, must not be negative", c.WaitReplicas))
	}
	if c.OnRedisLoss != FailOpen && c.OnRedisLoss != FailClosed {
		errs = append(errs, fmt.Errorf("cluster: unknown OnRedisLoss %d", c.OnRedisLoss))
	}
	s.MaxWaiters = cmp.Or(c.MaxWaiters, DefaultMaxWaiters)
	s.PriorityMaxWait = cmp.Or(c.PriorityMaxWait, pool.Config{}.WithDefaults().PriorityMaxWait)
	s.tick = s.LeaseTTL / 3
	s.pollInterval = min(cmp.Or(c.PollInterval, DefaultPollInterval), s.tick)
	// A waiting gateway asks again every pollInterval: a place not asked
	// for in ten of them (1 s by default) is a dead gateway's.
	s.placeTTL = min(10*s.pollInterval, s.LeaseTTL)
	// One Redis operation may take at most a third of the TTL (and 2 s):
	// slower than that, the gateway serves on its local share instead.
	s.opTimeout = min(s.tick, 2*time.Second)
	return s, errors.Join(errs...)
}
