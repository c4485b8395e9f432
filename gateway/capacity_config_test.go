package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/pool"
)

// TestCapacityKeys: the keys of issue 14 come from the environment (and so
// from the YAML file and flags, which share the table), reach pool.Config,
// and bad values are reported.
func TestCapacityKeys(t *testing.T) {
	env := map[string]string{
		"GRADIOPOOL_REPLICAS":               "a/b,c/d",
		"GRADIOPOOL_POOL_PRIORITY_MAX_WAIT": "4s",
		"GRADIOPOOL_POOL_ROUTING":           "least_in_use",
		"GRADIOPOOL_POOL_REBALANCE_FACTOR":  "2.5",
		"GRADIOPOOL_POOL_WARM_UP":           "true",
		"GRADIOPOOL_POOL_DEMAND_WINDOW":     "30s",
		"GRADIOPOOL_POOL_MAX_LIFETIME":      "1h",
		"GRADIOPOOL_POOL_IDLE_DISCONNECT":   "15m",
		"GRADIOPOOL_POOL_WAKE_SLEEPING":     "1",
	}
	var c gateway.Config
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	c.Normalize()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	pc := c.PoolConfig(nil, nil)
	if pc.PriorityMaxWait != 4*time.Second || pc.Routing != pool.RouteLeastInUse || pc.RebalanceFactor != 2.5 || !pc.WarmUp || pc.DemandWindow != 30*time.Second || pc.MaxLifetime != time.Hour || pc.IdleDisconnect != 15*time.Minute || !pc.WakeSleeping {
		t.Errorf("pool config %+v", pc)
	}

	var d gateway.Config
	if err := d.LoadYAML("test.yaml", []byte("replicas: [a/b]\npool:\n  routing: fastest\n  rebalance_factor: 0.5\n")); err != nil {
		t.Fatal(err)
	}
	d.Normalize()
	err := d.Validate()
	if err == nil || !strings.Contains(err.Error(), "pool.routing") || !strings.Contains(err.Error(), "pool.rebalance_factor") {
		t.Errorf("Validate: %v, want routing and rebalance_factor errors", err)
	}

	var e gateway.Config
	e.Pool.Replicas = []string{"a/b"}
	e.Normalize()
	if pc := e.PoolConfig(nil, nil); pc.PriorityMaxWait != (pool.Config{}).WithDefaults().PriorityMaxWait || pc.Routing != pool.RouteExpectedTime || pc.RebalanceFactor != 0 || pc.WarmUp {
		t.Errorf("defaults: %+v", pc)
	}
}

// TestSpaceMetrics: the Space's queue and expected time per replica are
// in /metrics and in the pool-stats JSON.
func TestSpaceMetrics(t *testing.T) {
	srv, _, _ := realGateway(t, 1, nil)
	if a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["x"]}`); a.status != 200 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	m := do(t, "GET", srv.URL+"/metrics", "")
	for _, want := range []string{"gradiopool_space_queue{replica=", "gradiopool_space_eta_seconds{replica="} {
		if !strings.Contains(m.body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	st := do(t, "GET", srv.URL+"/api/admin/pool-stats", "")
	for _, want := range []string{`"spaceQueue":`, `"spaceEtaSeconds":`, `"endpoints":{"upper":`} {
		if !strings.Contains(st.body, want) {
			t.Errorf("pool-stats lacks %s: %s", want, st.body)
		}
	}
}
