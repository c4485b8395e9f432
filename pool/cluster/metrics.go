package cluster

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric descriptions of [Coordinator.Collector]. Labels are replica names,
// gateway ids and operation kinds only.
var (
	descRedisUp = prometheus.NewDesc("gradiopool_redis_up",
		"1 while this gateway reaches Redis (limits are global), 0 while it serves on local shares.", nil, nil)
	descAlive = prometheus.NewDesc("gradiopool_cluster_gateways_alive",
		"Gateways alive in the cluster (with a heartbeat younger than lease_ttl); while Redis is lost, those last seen.", nil, nil)
	descLeases = prometheus.NewDesc("gradiopool_cluster_leases",
		"Calls in flight on a replica across every gateway (leases in Redis), as of the last refresh.", []string{"replica"}, nil)
	descLeasesMax = prometheus.NewDesc("gradiopool_cluster_leases_max",
		"A replica's limit across every gateway (max_connections).", []string{"replica"}, nil)
	descGwLeases = prometheus.NewDesc("gradiopool_cluster_gateway_leases",
		"Leases held per gateway and replica, as published by each gateway.", []string{"replica", "gateway"}, nil)
	descGwSessions = prometheus.NewDesc("gradiopool_cluster_gateway_sessions",
		"Sessions open per gateway and replica, as published by each gateway.", []string{"replica", "gateway"}, nil)
	descGwWaiting = prometheus.NewDesc("gradiopool_cluster_gateway_waiting",
		"Callers waiting per gateway and replica, as published by each gateway.", []string{"replica", "gateway"}, nil)
	descLocal = prometheus.NewDesc("gradiopool_cluster_local_leases",
		"Leases this gateway holds now, by replica.", []string{"replica"}, nil)
	descShare = prometheus.NewDesc("gradiopool_cluster_local_share",
		"This gateway's share of a replica's limit while Redis is lost (limit / gateways last seen alive, at least 1).", []string{"replica"}, nil)
	descFallbacks = prometheus.NewDesc("gradiopool_cluster_redis_fallbacks_total",
		"Times this gateway lost Redis and fell back to local shares.", nil, nil)
	descExpired = prometheus.NewDesc("gradiopool_cluster_leases_expired_total",
		"Leases that expired before their refresh (the gateway stalled longer than lease_ttl) and were registered again.", nil, nil)
	descOps = prometheus.NewDesc("gradiopool_cluster_redis_ops_total",
		"Redis round trips of this gateway's cluster work, by operation.", []string{"op"}, nil)
)

// Collector returns the gradiopool_cluster_* metrics (and
// gradiopool_redis_up), read at scrape time without Redis I/O: the cluster
// numbers are those of the last refresh (every LeaseTTL/3).
func (c *Coordinator) Collector() prometheus.Collector { return collector{c} }

type collector struct{ c *Coordinator }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRedisUp, descAlive, descLeases, descLeasesMax, descGwLeases, descGwSessions,
		descGwWaiting, descLocal, descShare, descFallbacks, descExpired, descOps} {
		ch <- d
	}
}

func (m collector) Collect(ch chan<- prometheus.Metric) {
	c := m.c
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	cnt := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	up := 0.0
	if c.RedisUp() {
		up = 1
	}
	g(descRedisUp, up)
	for _, l := range c.limiters() {
		g(descLocal, float64(l.heldCount()), l.name)
		g(descShare, float64(c.share(l.limit)), l.name)
		g(descLeasesMax, float64(l.limit), l.name)
	}
	if st := c.lastStats(); st != nil {
		g(descAlive, float64(st.GatewaysAlive))
		for name, r := range st.Pools {
			g(descLeases, float64(r.Leases), name)
			for gw, gr := range r.Gateways {
				g(descGwLeases, float64(gr.Leases), name, gw)
				g(descGwSessions, float64(gr.Sessions), name, gw)
				g(descGwWaiting, float64(gr.Waiting), name, gw)
			}
		}
	} else {
		g(descAlive, float64(len(c.lastAlive())))
	}
	cnt(descFallbacks, c.fallbacks.Load())
	cnt(descExpired, c.relost.Load())
	for i := range numOps {
		cnt(descOps, c.ops[i].Load(), opNames[i])
	}
}
