package cluster

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// GatewayStats is what one gateway publishes (with a TTL of LeaseTTL)
// every LeaseTTL/3.
type GatewayStats struct {
	Gateway  string                    `json:"gateway"`
	Host     string                    `json:"host,omitempty"`
	RedisUp  bool                      `json:"redisUp"`
	Updated  time.Time                 `json:"updated"`
	Replicas map[string]GatewayReplica `json:"replicas"`
}

// GatewayReplica is one replica as seen by one gateway.
type GatewayReplica struct {
	Leases     int `json:"leases"`     // calls this gateway runs under the replica's limit
	LocalShare int `json:"localShare"` // its share while Redis is lost
	LocalReplica
}

// Stats is the cluster view served by pool-stats?scope=cluster.
type Stats struct {
	Scope   string `json:"scope"` // "cluster"
	Cluster string `json:"cluster"`
	// Gateway is the gateway that answered.
	Gateway string `json:"gateway"`
	// RedisUp is false when the answering gateway cannot reach Redis:
	// then Gateways holds only itself.
	RedisUp       bool                      `json:"redisUp"`
	LeaseTTLMs    int64                     `json:"leaseTtlMs"`
	GatewaysAlive int                       `json:"gatewaysAlive"`
	Gateways      map[string]GatewayStats   `json:"gateways"`
	Pools         map[string]ClusterReplica `json:"pools"`
	// Totals over the replicas.
	TotalLeases      int `json:"totalLeases"`
	TotalConnections int `json:"totalConnections"`
	TotalInUse       int `json:"totalInUse"`
	TotalQueued      int `json:"totalQueued"`
}

// ClusterReplica is one replica over the whole cluster.
type ClusterReplica struct {
	// MaxConnections is the replica's limit across every gateway.
	MaxConnections int `json:"maxConnections"`
	// Leases are the calls in flight under the limit, counted in Redis
	// (the published per-gateway numbers may be up to LeaseTTL/3 old).
	Leases int `json:"leases"`
	// Reserved are slots kept for gateways rejoining after an outage.
	Reserved         int `json:"reserved"`
	TotalConnections int `json:"totalConnections"`
	InUseConnections int `json:"inUseConnections"`
	QueueLength      int `json:"queueLength"`
	// Gateways has this replica's numbers per gateway id.
	Gateways map[string]GatewayReplica `json:"gateways"`
}

// localStats is this gateway's part.
func (c *Coordinator) localStats() GatewayStats {
	var local map[string]LocalReplica
	if c.cfg.LocalStats != nil {
		local = c.cfg.LocalStats()
	}
	st := GatewayStats{Gateway: c.id, Host: c.host, RedisUp: c.RedisUp(), Updated: time.Now().UTC(), Replicas: map[string]GatewayReplica{}}
	for _, l := range c.limiters() {
		lr := local[l.name]
		lr.Waiting = max(lr.Waiting, l.waiting())
		st.Replicas[l.name] = GatewayReplica{Leases: l.heldCount(), LocalShare: c.share(l.limit), LocalReplica: lr}
	}
	return st
}

// Stats returns the cluster's statistics, read from Redis; while Redis is
// lost, this gateway's own (RedisUp false).
func (c *Coordinator) Stats(ctx context.Context) *Stats {
	if c.RedisUp() {
		ctx, cancel := context.WithTimeout(ctx, c.cfg.opTimeout)
		st, err := c.readStats(ctx)
		cancel()
		if err == nil {
			return st
		}
		if ctx.Err() == nil {
			c.failed(err)
		}
	}
	self := c.localStats()
	return c.assemble(map[string]GatewayStats{c.id: self}, nil, nil, false)
}

// readStats reads every live gateway's published stats and the leases
// counted in Redis, in one pipeline.
func (c *Coordinator) readStats(ctx context.Context) (*Stats, error) {
	lims := c.limiters()
	var gws *redis.StringSliceCmd
	cards := make([]*redis.IntCmd, len(lims))
	resv := make([]*redis.StringSliceCmd, len(lims))
	now := time.Now().UnixMilli()
	c.ops[opStats].Add(1)
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		gws = p.ZRangeByScore(ctx, c.prefix+"gw", &redis.ZRangeBy{Min: "(" + itoa(now), Max: "+inf"})
		for i, l := range lims {
			cards[i] = p.ZCount(ctx, l.keys[0], "("+itoa(now), "+inf")
			resv[i] = p.ZRangeByScore(ctx, l.keys[3], &redis.ZRangeBy{Min: "(" + itoa(now), Max: "+inf"})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ids := gws.Val()
	if slices.Contains(ids, c.id) {
		c.mu.Lock()
		c.alive = slices.Clone(ids)
		for _, g := range ids {
			delete(c.reserved, g)
		}
		c.mu.Unlock()
	}
	all := map[string]GatewayStats{}
	if len(ids) > 0 {
		keys := make([]string, len(ids))
		for i, id := range ids {
			keys[i] = c.statsKey(id)
		}
		c.ops[opStats].Add(1)
		vals, err := c.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, err
		}
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue // expired between the two reads
			}
			var g GatewayStats
			if json.Unmarshal([]byte(s), &g) == nil {
				all[ids[i]] = g
			}
		}
	}
	all[c.id] = c.localStats() // our own, fresh
	leases := map[string]int{}
	reserved := map[string]int{}
	for i, l := range lims {
		leases[l.name] = int(cards[i].Val())
		for _, m := range resv[i].Val() {
			reserved[l.name] += reservedSlots(m)
		}
	}
	return c.assemble(all, leases, reserved, true), nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// reservedSlots parses "gateway|n".
func reservedSlots(m string) int {
	if i := strings.LastIndexByte(m, '|'); i >= 0 {
		n, _ := strconv.Atoi(m[i+1:])
		return n
	}
	return 0
}

// assemble sums per-gateway stats into the cluster view. leases nil: not
// read from Redis (then the published numbers are summed).
func (c *Coordinator) assemble(gws map[string]GatewayStats, leases, reserved map[string]int, up bool) *Stats {
	st := &Stats{Scope: "cluster", Cluster: c.cfg.Name, Gateway: c.id, RedisUp: up, LeaseTTLMs: c.cfg.LeaseTTL.Milliseconds(),
		GatewaysAlive: len(gws), Gateways: gws, Pools: map[string]ClusterReplica{}}
	names := map[string]bool{}
	for _, g := range gws {
		for n := range g.Replicas {
			names[n] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		cr := ClusterReplica{MaxConnections: c.cfg.Limit, Gateways: map[string]GatewayReplica{}}
		sum := 0
		for id, g := range gws {
			r, ok := g.Replicas[n]
			if !ok {
				continue
			}
			cr.Gateways[id] = r
			sum += r.Leases
			cr.TotalConnections += r.Sessions
			cr.InUseConnections += r.InUse
			cr.QueueLength += r.Waiting
		}
		cr.Leases = sum
		if leases != nil {
			cr.Leases = leases[n]
			cr.Reserved = reserved[n]
		}
		st.Pools[n] = cr
		st.TotalLeases += cr.Leases
		st.TotalConnections += cr.TotalConnections
		st.TotalInUse += cr.InUseConnections
		st.TotalQueued += cr.QueueLength
	}
	return st
}

// lastStats is the cluster view of the last refresh (nil before the
// first, or while Redis is lost), for the metrics.
func (c *Coordinator) lastStats() *Stats {
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	if !c.RedisUp() {
		return nil
	}
	return c.snap
}
