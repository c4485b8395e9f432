package gateway_test

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/pool"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestConfigExampleFile: the example file loads to the defaults; its only
// missing key is replicas (commented out, with an example), so that a copy
// cannot run with an illustration taken for a setting.
func TestConfigExampleFile(t *testing.T) {
	var c gateway.Config
	if err := c.LoadFile(filepath.Join("..", "configs", "gradiopool.example.yaml")); err != nil {
		t.Fatal(err)
	}
	if c.FrontDoor.PublicURL != "" || len(c.FrontDoor.PinnedEndpoints) != 0 || len(c.Pool.Replicas) != 0 {
		t.Fatalf("the example sets keys that have no default: public_url %q, pinned_endpoints %q, replicas %q",
			c.FrontDoor.PublicURL, c.FrontDoor.PinnedEndpoints, c.Pool.Replicas)
	}
	c.Normalize()
	err := c.Validate()
	if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.HasPrefix(err.Error(), "replicas: at least one replica") {
		t.Fatalf("the example alone: %v, want only the missing replicas refused", err)
	}
	c.Pool.Replicas = []string{"owner/app"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	p := c.Pool
	if p.MinConnections != 5 || p.MaxConnections != 50 || p.IdleTimeout != 10*time.Minute || p.QueueTimeout != 30*time.Second ||
		p.HealthCheckInterval != 5*time.Minute || p.HealthCheckMaxConnections != 5 || p.UnhealthyAfterFailures != 3 ||
		p.ConnectRetries != 3 || p.UserAssignmentTTL != time.Hour {
		t.Fatalf("%+v", p)
	}
	var d gateway.Config
	d.Pool.Replicas = []string{"owner/app"}
	d.Normalize()
	if c.String() != d.String() {
		t.Errorf("the example differs from the defaults:\n%s\n%s", c.String(), d.String())
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
		{"unknown key", "replicas: [a/b]\npool:\n  max_conections: 3\n", nil, nil, `line 3: unknown key "max_conections" (pool.max_conections): did you mean pool.max_connections?`},
		{"key without its section", "replicas: [a/b]\nmax_connections: 3\n", nil, nil, `line 2: unknown key "max_connections": did you mean pool.max_connections?`},
		{"unknown key far from any", "replicas: [a/b]\nzebra: 3\n", nil, nil, `line 2: unknown key "zebra"`},
		{"bad duration", "replicas: [a/b]\npool:\n  idle_timeout: 10x\n", nil, nil, `line 3: pool.idle_timeout: "10x" is not a duration (e.g. 30s`},
		{"duration without unit", "replicas: [a/b]\npool:\n  idle_timeout: 30\n", nil, nil, `line 3: pool.idle_timeout: "30" is not a duration`},
		{"fraction for an integer", "replicas: [a/b]\npool:\n  max_connections: 1.5\n", nil, nil, `line 3: pool.max_connections: "1.5" is a fraction: want a whole number`},
		{"env fraction for an integer", "replicas: [a/b]\n", map[string]string{"GRADIOPOOL_POOL_MAX_CONNECTIONS": "1.5"}, nil, `GRADIOPOOL_POOL_MAX_CONNECTIONS (pool.max_connections): "1.5" is a fraction`},
		{"bad boolean", "replicas: [a/b]\npool:\n  warm_up: maybe\n", nil, nil, `line 3: pool.warm_up: "maybe" is not a boolean`},
		{"mapping for a value", "replicas: [a/b]\nlisten:\n  host: x\n", nil, nil, `line 3: listen: want a single value`},
		{"space page", "replicas: [https://huggingface.co/spaces/owner/app]\n", nil, nil, `replicas[0]: "https://huggingface.co/spaces/owner/app" is the Space's page on the Hub, not its app: give the Space id owner/app`},
		{"same replica twice", "replicas: [owner/my_app, https://owner-my-app.hf.space/]\n", nil, nil, `replicas[1]: "https://owner-my-app.hf.space/" is replicas[0] ("owner/my_app") again`},
		{"same URL twice", "replicas: [\"https://App.example:443/x/\", https://app.example/x]\n", nil, nil, `replicas[1]: "https://app.example/x" is replicas[0]`},
		{"same space id in other case", "replicas: [Owner/App, owner/app]\n", nil, nil, `replicas[1]: "owner/app" is replicas[0]`},
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

// TestConfigErrorNamesOnlyWhatWasWrong: a maximum below 1 is reported
// alone; the minimum, derived from it and never set, is not blamed.
func TestConfigErrorNamesOnlyWhatWasWrong(t *testing.T) {
	err := load("replicas: [a/b]\npool:\n  max_connections: -3\n", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "pool.max_connections: -3, must be at least 1") {
		t.Fatalf("error %v, want pool.max_connections named", err)
	}
	if strings.Contains(err.Error(), "min_connections") {
		t.Errorf("error %q blames pool.min_connections, which was not set", err)
	}
}

// TestConfigReplicaSpellings: spellings of distinct replicas are not
// taken for one another.
func TestConfigReplicaSpellings(t *testing.T) {
	if err := load("replicas: [owner/app, owner/app-2, https://owner-app.hf.space/gradio, http://h:80/a, http://h:8080/a, https://h/a, https://h/b]\n", nil, nil); err != nil {
		t.Fatal(err)
	}
}

// TestConfigYAMLValues: the values the file accepts are the ones the
// environment accepts, lists as sequences or comma-separated.
func TestConfigYAMLValues(t *testing.T) {
	var c gateway.Config
	y := "replicas: a/b, c/d\nlisten:\npool:\n  max_connections: \"7\"\n  warm_up: true\n  rebalance_factor: 2.5\n  routing: least_in_use\nfrontdoor:\n  pinned_endpoints: [/chat, \"#3\"]\n"
	if err := c.LoadYAML("f.yaml", []byte(y)); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintln(c.Pool.Replicas, c.Pool.MaxConnections, c.Pool.WarmUp, c.Pool.RebalanceFactor, c.Pool.Routing, c.FrontDoor.PinnedEndpoints, c.Listen); got != "[a/b c/d] 7 true 2.5 least_in_use [/chat #3] \n" {
		t.Errorf("got %s", got)
	}
}

// TestCheckEnviron: a GRADIOPOOL_ variable that serve does not read is
// refused with the variable it most likely meant; the tests' and tools'
// switches and other programs' variables pass.
func TestCheckEnviron(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string // "" : accepted
	}{
		{[]string{"GRADIOPOOL_POOL_MAX_CONECTIONS=7"}, "GRADIOPOOL_POOL_MAX_CONECTIONS is no setting: did you mean GRADIOPOOL_POOL_MAX_CONNECTIONS?"},
		{[]string{"GRADIOPOOL_MAX_CONNECTIONS=7"}, "GRADIOPOOL_MAX_CONNECTIONS is no setting: did you mean GRADIOPOOL_POOL_MAX_CONNECTIONS?"},
		{[]string{"GRADIOPOOL_ADMIN_TOKN=secret-value"}, "did you mean GRADIOPOOL_ADMIN_TOKEN?"},
		{[]string{"GRADIOPOOL_COMPLETELY_DIFFERENT=1"}, "GRADIOPOOL_COMPLETELY_DIFFERENT is no setting (unset it"},
		{[]string{"GRADIOPOOL_POOL_MAX_CONNECTIONS=7", "GRADIOPOOL_CONFIG=x.yaml", "GRADIOPOOL_API_KEYS=k", "HF_TOKEN=t", "PATH=/bin", "OTEL_SERVICE_NAME=x"}, ""},
		{[]string{"GRADIOPOOL_REQUIRE_NODE=1", "GRADIOPOOL_ARTIFACTS=/tmp/a", "GRADIOPOOL_UPDATE_README=1", "GRADIOPOOL_RELIABILITY=long", "GRADIOPOOL_URL=http://127.0.0.1:8080", "GRADIOPOOL_API_KEY=k"}, ""},
	} {
		err := gateway.CheckEnviron(tc.env)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v, want accepted", tc.env, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want %q", tc.env, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "secret-value"):
			t.Errorf("the error quotes a value: %v", err)
		}
	}
}

// TestEveryGRADIOPOOLVariableIsKnown: every GRADIOPOOL_ name the
// repository's code, scripts and recipes use is a setting, a secret or one
// of gateway.IgnoredEnv, so that no test, tool or recipe that sets one for
// a gateway's process makes serve refuse to start.
func TestEveryGRADIOPOOLVariableIsKnown(t *testing.T) {
	re := regexp.MustCompile(`GRADIOPOOL_[A-Z0-9_]*[A-Z0-9]`)
	found := map[string]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "node_modules" || n == ".git" || n == "test-artifacts" || n == "dist" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".mjs", ".js", ".ts", ".sh", ".py", ".yml", ".yaml", ".service", ".json":
		default:
			if b := filepath.Base(path); b != "Makefile" && b != "Dockerfile" {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, "_test.go") && strings.Contains(string(b), "did you mean") {
			return nil // a test of the refusal: its misspellings are on purpose
		}
		for _, name := range re.FindAllString(string(b), -1) {
			found[name] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 30 {
		t.Fatalf("found %d GRADIOPOOL_ names, the walk missed files", len(found))
	}
	var env []string
	for name := range found {
		env = append(env, name+"=x")
	}
	if err := gateway.CheckEnviron(env); err != nil {
		t.Errorf("names used in the repository that serve would refuse (add a test's or tool's to otherEnv in gateway/suggest.go): %v", err)
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
