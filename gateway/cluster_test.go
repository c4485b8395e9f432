package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
)

func TestClusterConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		env  map[string]string
		want string // "" valid
	}{
		{"defaults", "replicas: [a/b]\n", nil, ""},
		{"file url without password", "replicas: [a/b]\ncluster:\n  redis_url: rediss://redis.internal:6380/0\n", map[string]string{"GRADIOPOOL_HASH_KEY": "k"}, ""},
		{"password in the file", "replicas: [a/b]\ncluster:\n  redis_url: redis://:filePa55@redis:6379/0\n", map[string]string{"GRADIOPOOL_HASH_KEY": "k"}, "holds a password"},
		{"not redis", "replicas: [a/b]\ncluster:\n  redis_url: http://redis:6379\n", map[string]string{"GRADIOPOOL_HASH_KEY": "k"}, "not a redis:// or rediss:// URL"},
		{"file url needs the hash key", "replicas: [a/b]\ncluster:\n  redis_url: redis://redis:6379/0\n", nil, "GRADIOPOOL_HASH_KEY is not"},
		{"lease ttl too short", "replicas: [a/b]\ncluster:\n  lease_ttl: 10ms\n", nil, "cluster.lease_ttl"},
		{"bad name", "replicas: [a/b]\n", map[string]string{"GRADIOPOOL_CLUSTER_NAME": "a b{"}, "cluster.name"},
		{"env", "replicas: [a/b]\n", map[string]string{"GRADIOPOOL_CLUSTER_NAME": "team-a", "GRADIOPOOL_CLUSTER_LEASE_TTL": "3s"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c gateway.Config
			if err := c.LoadYAML("test.yaml", []byte(tc.yaml)); err != nil {
				t.Fatal(err)
			}
			if err := c.ApplyEnv(envMap(tc.env)); err != nil {
				t.Fatal(err)
			}
			c.Normalize()
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "filePa55") {
				t.Fatal("the password leaked into the error")
			}
			if tc.name == "env" && (c.Cluster.Name != "team-a" || c.Cluster.LeaseTTL != 3*time.Second) {
				t.Fatalf("env not applied: %+v", c.Cluster)
			}
			if tc.name == "defaults" && (c.Cluster.Name != gateway.DefaultClusterName || c.Cluster.LeaseTTL != gateway.DefaultClusterLeaseTTL) {
				t.Fatalf("defaults: %+v", c.Cluster)
			}
		})
	}
	var c gateway.Config
	_ = c.ApplyEnv(envMap(map[string]string{"GRADIOPOOL_REDIS_URL": "redis://:envPa55@h:1/0"}))
	c.Cluster.RedisURL = "redis://other:1/0"
	if c.RedisURL() != "redis://:envPa55@h:1/0" {
		t.Error("GRADIOPOOL_REDIS_URL does not win over cluster.redis_url")
	}
	if s := c.String(); strings.Contains(s, "envPa55") {
		t.Errorf("the password leaks in %s", s)
	}
}

func TestStatsScope(t *testing.T) {
	g, srv, _ := newGateway(t, newFake(), nil)
	if a := do(t, "GET", srv.URL+"/api/admin/pool-stats?scope=cluster", ""); a.status != 400 || !strings.Contains(a.body, `"code":"bad_scope"`) {
		t.Errorf("scope=cluster without a cluster: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/api/admin/pool-stats?scope=galaxy", ""); a.status != 400 || !strings.Contains(a.body, `"code":"bad_scope"`) {
		t.Errorf("unknown scope: %d %s", a.status, a.body)
	}
	g.SetClusterStats(func(ctx context.Context) any { return map[string]string{"scope": "cluster"} })
	if a := do(t, "GET", srv.URL+"/api/admin/pool-stats?scope=cluster", ""); a.status != 200 || !strings.Contains(a.body, `"scope":"cluster"`) {
		t.Errorf("scope=cluster: %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/api/admin/pool-stats?scope=gateway", ""); a.status != 200 || strings.Contains(a.body, `"scope":"cluster"`) {
		t.Errorf("scope=gateway: %d %s", a.status, a.body)
	}
}
