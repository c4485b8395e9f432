package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gradiopool/gradiopool/gateway"
)

// unit reads a systemd unit's Key=Value lines of one section.
func unit(t *testing.T, path, section string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kv := map[string][]string{}
	cur := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			cur = strings.Trim(line, "[]")
		case cur == section:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is not Key=Value", path, line)
			}
			kv[k] = append(kv[k], v)
		}
	}
	return kv
}

func TestSystemdUnit(t *testing.T) {
	svc := unit(t, "systemd/gradiopool.service", "Service")
	one := func(k string) string {
		if len(svc[k]) != 1 {
			t.Fatalf("[Service] %s: %q, want one value", k, svc[k])
		}
		return svc[k][0]
	}
	if got := one("ExecReload"); got != "/bin/kill -HUP $MAINPID" {
		t.Errorf("ExecReload=%q, want SIGHUP to the main process", got)
	}
	if got := one("ExecStart"); !strings.HasSuffix(got, "gradiopool serve") {
		t.Errorf("ExecStart=%q", got)
	}
	if got := one("KillSignal"); got != "SIGTERM" {
		t.Errorf("KillSignal=%q, want SIGTERM (the drain)", got)
	}
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	if stop <= gateway.DefaultDrainTimeout {
		t.Errorf("TimeoutStopSec=%v is not above drain_timeout (%v): systemd would kill the drain", stop, gateway.DefaultDrainTimeout)
	}
	if _, ok := unit(t, "systemd/gradiopool.service", "Install")["WantedBy"]; !ok {
		t.Error("no [Install] WantedBy")
	}
}

// manifests decodes every YAML document of the files, by kind/name.
func manifests(t *testing.T, files ...string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			name := get[string](t, doc, "metadata", "name")
			out[get[string](t, doc, "kind")+"/"+name] = doc
		}
	}
	return out
}

// get walks maps by key and lists by index ("0").
func get[T any](t *testing.T, v any, path ...string) T {
	t.Helper()
	for i, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			if p != "0" || len(x) == 0 {
				t.Fatalf("%v: want index 0 of a non-empty list", path[:i+1])
			}
			v = x[0]
		default:
			t.Fatalf("%v: %T is not a map or list", path[:i+1], v)
		}
	}
	r, ok := v.(T)
	if !ok {
		var zero T
		t.Fatalf("%v: %v (%T), want a %T", path, v, v, zero)
	}
	return r
}

func TestKubernetes(t *testing.T) {
	m := manifests(t, "k8s/gateway.yaml", "k8s/redis.yaml")
	dep, ok := m["Deployment/gradiopool"]
	if !ok {
		t.Fatalf("no Deployment gradiopool among %v", keys(m))
	}
	if n := get[int](t, dep, "spec", "replicas"); n < 2 {
		t.Errorf("replicas %d: the manifests are for several gateways", n)
	}
	pod := get[map[string]any](t, dep, "spec", "template", "spec")
	c := get[map[string]any](t, pod, "containers", "0")
	if p := get[string](t, c, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("liveness on %q, want /healthz", p)
	}
	if p := get[string](t, c, "readinessProbe", "httpGet", "path"); p != "/readyz" {
		t.Errorf("readiness on %q, want /readyz", p)
	}
	env := map[string]string{}
	for _, e := range get[[]any](t, c, "env") {
		name := get[string](t, e, "name")
		if _, ok := e.(map[string]any)["valueFrom"]; ok {
			env[name] = "" // from the pod (POD_IP)
			continue
		}
		env[name] = get[string](t, e, "value")
	}
	if env["GRADIOPOOL_CLUSTER_ADVERTISE_URL"] != "http://$(POD_IP):8080" {
		t.Errorf("GRADIOPOOL_CLUSTER_ADVERTISE_URL %q: the other gateways must reach each pod at its address", env["GRADIOPOOL_CLUSTER_ADVERTISE_URL"])
	}
	drain := gateway.DefaultDrainTimeout
	if v, ok := env["GRADIOPOOL_DRAIN_TIMEOUT"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		drain = d
	}
	preStop := time.Duration(get[int](t, c, "lifecycle", "preStop", "sleep", "seconds")) * time.Second
	grace := time.Duration(get[int](t, pod, "terminationGracePeriodSeconds")) * time.Second
	if grace <= drain+preStop {
		t.Errorf("terminationGracePeriodSeconds %v is not above drain_timeout %v + preStop %v", grace, drain, preStop)
	}
	if !get[bool](t, pod, "securityContext", "runAsNonRoot") {
		t.Error("the pod may run as root")
	}
	if get[string](t, c, "envFrom", "0", "secretRef", "name") == "" {
		t.Error("no secretRef for HF_TOKEN and the admin token")
	}

	// The Service reaches the gateways' named port.
	svc, ok := m["Service/gradiopool"]
	if !ok {
		t.Fatal("no Service gradiopool")
	}
	if sel, lab := get[string](t, svc, "spec", "selector", "app"), get[string](t, dep, "spec", "template", "metadata", "labels", "app"); sel != lab {
		t.Errorf("the Service selects app=%s, the pods are app=%s", sel, lab)
	}
	if tp := get[string](t, svc, "spec", "ports", "0", "targetPort"); tp != get[string](t, c, "ports", "0", "name") {
		t.Errorf("the Service targets port %q, the container names %q", tp, get[string](t, c, "ports", "0", "name"))
	}

	// Several gateways share Redis: its URL names the Redis Service.
	u, err := url.Parse(env["GRADIOPOOL_REDIS_URL"])
	if err != nil || u.Scheme != "redis" {
		t.Fatalf("GRADIOPOOL_REDIS_URL %q", env["GRADIOPOOL_REDIS_URL"])
	}
	rsvc, ok := m["Service/"+u.Hostname()]
	if !ok {
		t.Fatalf("GRADIOPOOL_REDIS_URL names %s, which is not a Service here (%v)", u.Hostname(), keys(m))
	}
	if _, ok := m["Deployment/"+get[string](t, rsvc, "spec", "selector", "app")]; !ok {
		t.Errorf("no Redis Deployment behind Service %s", u.Hostname())
	}
	if p := get[int](t, rsvc, "spec", "ports", "0", "port"); u.Port() != "" && u.Port() != "6379" || p != 6379 {
		t.Errorf("Redis port: URL %q, Service %d", u.Port(), p)
	}
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
