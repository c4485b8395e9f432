package gateway_test

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/pool"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestConfigExampleFile(t *testing.T) {
	var c gateway.Config
	if err := c.LoadFile(filepath.Join("..", "configs", "gradiopool.example.yaml")); err != nil {
		t.Fatal(err)
	}
	c.Normalize()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{"owner/app", "https://app-2.example"}
	if fmt.Sprint(c.Pool.Replicas) != fmt.Sprint(want) {
		t.Fatal(c.Pool.Replicas)
	}
	p := c.Pool
	if p.MinConnections != 5 || p.MaxConnections != 50 || p.IdleTimeout != 10*time.Minute || p.QueueTimeout != 30*time.Second ||
		p.HealthCheckInterval != 5*time.Minute || p.HealthCheckMaxConnections != 5 || p.UnhealthyAfterFailures != 3 ||
		p.ConnectRetries != 3 || p.UserAssignmentTTL != time.Hour {
		t.Fatalf("%+v", p)
	}
}

func TestConfigPrecedence(t *testing.T) {
	yaml := "listen: 127.0.0.1:1\nreplicas: [a/file]\npool:\n  max_connections: 10\n  min_connections: 2\n  queue_timeout: 5s\n"
	var c gateway.Config
	if err := c.LoadYAML("f.yaml", []byte(yaml)); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"GRADIOPOOL_LISTEN": "127.0.0.1:2", "GRADIOPOOL_REPLICAS": "a/env1, a/env2",
		"GRADIOPOOL_POOL_MAX_CONNECTIONS": "20", "HF_TOKEN": "hf_secret",
		"GRADIOPOOL_API_KEYS": "k1,k2", "GRADIOPOOL_ADMIN_TOKEN": "adm",
	}
	if err := c.ApplyEnv(envMap(env)); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	apply := gateway.Flags(fs)
	if err := fs.Parse([]string{"--listen", "127.0.0.1:3", "--queue-timeout=7s"}); err != nil {
		t.Fatal(err)
	}
	if err := apply(&c); err != nil {
		t.Fatal(err)
	}
	c.Normalize()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, got, want string }{
		{"flag over env", c.Listen, "127.0.0.1:3"},
		{"env over file", fmt.Sprint(c.Pool.Replicas), "[a/env1 a/env2]"},
		{"env int", fmt.Sprint(c.Pool.MaxConnections), "20"},
		{"file kept", fmt.Sprint(c.Pool.MinConnections), "2"},
		{"flag duration", c.Pool.QueueTimeout.String(), "7s"},
		{"default", c.Pool.IdleTimeout.String(), "10m0s"},
		{"api keys", fmt.Sprint(len(c.Secrets.APIKeys)), "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %s, want %s", tc.got, tc.want)
			}
		})
	}
	t.Run("secrets redacted", func(t *testing.T) {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", c, "secrets", c.Secrets)
		for _, s := range []string{c.String(), fmt.Sprintf("%v %+v %#v", c, c, c.Secrets), buf.String()} {
			for _, secret := range []string{"hf_secret", "k1", "adm\""} {
				if strings.Contains(s, secret) {
					t.Fatalf("%q leaks %q", s, secret)
				}
			}
		}
	})
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		flags      []string
		want       string
	}{
		{"unknown key", "replicas: [a/b]\npool:\n  max_conections: 3\n", nil, nil, `line 3: unknown key "max_conections"`},
		{"bad duration", "replicas: [a/b]\npool:\n  idle_timeout: 10x\n", nil, nil, "line 3: cannot unmarshal !!str `10x` into time.Duration (want a duration"},
		{"min above max", "replicas: [a/b]\npool:\n  min_connections: 9\n  max_connections: 3\n", nil, nil, "pool.min_connections (9) is above pool.max_connections (3)"},
		{"no replicas", "listen: 127.0.0.1:1\n", nil, nil, "replicas: at least one replica"},
		{"bad replica", "replicas: [justaname]\n", nil, nil, "neither a Space id"},
		{"env bad int", "replicas: [a/b]\n", map[string]string{"GRADIOPOOL_POOL_MAX_CONNECTIONS": "many"}, nil, `GRADIOPOOL_POOL_MAX_CONNECTIONS (pool.max_connections): "many" is not an integer`},
		{"env bad duration", "replicas: [a/b]\n", map[string]string{"GRADIOPOOL_POOL_QUEUE_TIMEOUT": "30"}, nil, `"30" is not a duration`},
		{"flag bad duration", "replicas: [a/b]\n", nil, []string{"--drain-timeout=soon"}, `invalid value "soon" for flag -drain-timeout`},
		{"bad log format", "replicas: [a/b]\nlog:\n  format: xml\n", nil, nil, `log.format: "xml"`},
		{"negative", "replicas: [a/b]\ndrain_timeout: -1s\n", nil, nil, "drain_timeout: -1s, must not be negative"},
		{"min below -1", "replicas: [a/b]\npool:\n  min_connections: -2\n", nil, nil, "pool.min_connections: -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := load(tc.yaml, tc.env, tc.flags)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func load(yaml string, env map[string]string, flags []string) error {
	var c gateway.Config
	dir, _ := os.MkdirTemp("", "cfg")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		return err
	}
	if err := c.LoadFile(path); err != nil {
		return err
	}
	if err := c.ApplyEnv(envMap(env)); err != nil {
		return err
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	apply := gateway.Flags(fs)
	if err := fs.Parse(flags); err != nil {
		return err
	}
	if err := apply(&c); err != nil {
		return err
	}
	c.Normalize()
	return c.Validate()
}

func TestConfigRedactsReplicaCredentials(t *testing.T) {
	c := gateway.Config{Pool: pool.Config{Replicas: []string{"https://user:pa55word@app.example/?token=t0k3n", "a/b"}}}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", c)
	for _, s := range []string{c.String(), buf.String()} {
		if strings.Contains(s, "pa55word") || strings.Contains(s, "t0k3n") {
			t.Fatal(s)
		}
	}
}

func TestPoolConfigMapping(t *testing.T) {
	c := gateway.Config{
		HubURL: "http://hub.local/",
		Pool: pool.Config{Replicas: []string{"a/b"}, MinConnections: -1, MaxConnections: 7, QueueTimeout: 3 * time.Second,
			ConnectRetries: 2, StickySessions: true, MaxWaiters: 9},
		Secrets: gateway.Secrets{HFToken: "hf_x", HashKey: "k"},
	}
	pc := c.PoolConfig(nil, gateway.NewMetrics(nil))
	for _, tc := range []struct {
		name     string
		got, exp any
	}{
		{"min none", pc.MinConnections, -1},
		{"max", pc.MaxConnections, 7},
		{"queue timeout", pc.QueueTimeout, 3 * time.Second},
		{"default idle", pc.IdleTimeout, pool.Config{}.WithDefaults().IdleTimeout},
		{"retries", pc.ConnectRetries, 2},
		{"waiters", pc.MaxWaiters, 9},
		{"sticky", pc.StickySessions, true},
		{"hash key", string(pc.HashKey), "k"},
		{"client options (token, hub, event budget)", len(pc.ClientOptions), 3},
		{"hook", pc.OnEvent != nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if fmt.Sprint(tc.got) != fmt.Sprint(tc.exp) {
				t.Fatalf("got %v, want %v", tc.got, tc.exp)
			}
		})
	}
}
