package gateway_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestReloadSecrets: a reload rotates the API keys and the admin token
// without a restart (the old ones are refused at once, the new ones
// pass); it refuses to remove the admin token or to turn the API keys off
// while the front door runs; it lists itself in the dashboard's events
// with the keys' names only; and the dashboard's capacity follows a new
// max_connections.
func TestReloadSecrets(t *testing.T) {
	sim := gradiotest.NewServer(gradiotest.DefaultApp())
	defer sim.Close()
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{sim.URL}, MinConnections: 1, MaxConnections: 50}}
	cfg.Secrets.AdminToken, cfg.Secrets.APIKeys = "adm1n-old", []string{"key-old"}
	g, base, logs, set := reloadGateway(t, cfg)
	call := func(key string) int {
		return do(t, "POST", base+"/v1/predict/upper", `{"data":["x"]}`, "Authorization", "Bearer "+key).status
	}
	stats := func(tok string) int {
		return do(t, "GET", base+"/api/admin/pool-stats", "", "Authorization", "Bearer "+tok).status
	}
	if call("key-old") != 200 || stats("adm1n-old") != 200 {
		t.Fatal("the start's secrets do not work")
	}

	next := cfg
	next.Pool.MaxConnections = 20
	next.Secrets.AdminToken, next.Secrets.APIKeys = "adm1n-new", []string{"key-new", "key-two"}
	set(next, nil)
	out, err := g.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Applied, []string{"pool.max_connections", "GRADIOPOOL_ADMIN_TOKEN", "GRADIOPOOL_API_KEYS"}) || len(out.Refused) != 0 {
		t.Errorf("Reload = %+v", out)
	}
	if got := call("key-old"); got != 403 {
		t.Errorf("old API key after the reload: %d, want 403", got)
	}
	if call("key-new") != 200 || call("key-two") != 200 {
		t.Error("a new API key is refused after the reload")
	}
	if got := stats("adm1n-old"); got != 403 {
		t.Errorf("old admin token after the reload: %d, want 403", got)
	}
	if got := stats("adm1n-new"); got != 200 {
		t.Errorf("new admin token after the reload: %d, want 200", got)
	}

	// The dashboard's capacity is the new max_connections.
	g.SampleHistory()
	doc := g.HistoryDoc(gateway.WindowRecent)
	last := doc.Points[len(doc.Points)-1]
	if len(last.Replicas) != 1 || last.Replicas[0].Max != 20 {
		t.Errorf("dashboard capacity after the reload: %+v, want max 20", last.Replicas)
	}

	// Removing the admin token, or every API key, is refused.
	open := next
	open.Secrets.AdminToken, open.Secrets.APIKeys = "", nil
	set(open, nil)
	out, err = g.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Refused, []string{"GRADIOPOOL_ADMIN_TOKEN", "GRADIOPOOL_API_KEYS"}) {
		t.Errorf("Reload removing the secrets = %+v", out)
	}
	if stats("") != 401 || call("") != 401 || stats("adm1n-new") != 200 {
		t.Error("the refused removal changed the secrets in effect")
	}

	var reloads []gateway.HistoryEvent
	for _, e := range g.HistoryDoc(gateway.WindowRecent).Events {
		if e.Kind == "reload" {
			reloads = append(reloads, e)
		}
	}
	if len(reloads) != 2 || !strings.Contains(reloads[0].Reason, "applied: pool.max_connections, GRADIOPOOL_ADMIN_TOKEN") ||
		!strings.Contains(reloads[1].Reason, "refused (restart to apply): GRADIOPOOL_ADMIN_TOKEN") {
		t.Errorf("reload events: %+v", reloads)
	}
	for _, s := range []string{"adm1n", "key-new", "key-old", "key-two"} {
		if strings.Contains(logs.String(), s) {
			t.Errorf("a secret (%s) reached the log", s)
		}
	}
}

// TestSecretFiles: GRADIOPOOL_ADMIN_TOKEN_FILE and GRADIOPOOL_API_KEYS_FILE
// read the secrets from files (one key per line, # comments), so that a
// reload reads a rotated file; setting a variable and its _FILE is an
// error, and so is a missing file, without the content in the message.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	tok, keys := filepath.Join(dir, "admin"), filepath.Join(dir, "keys")
	if err := os.WriteFile(tok, []byte("t0ken-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keys, []byte("# callers\nk-one\nk-two, k-three\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var c gateway.Config
	if err := c.ApplyEnv(envMap(map[string]string{"GRADIOPOOL_ADMIN_TOKEN_FILE": tok, "GRADIOPOOL_API_KEYS_FILE": keys})); err != nil {
		t.Fatal(err)
	}
	if c.Secrets.AdminToken != "t0ken-from-file" || !slices.Equal(c.Secrets.APIKeys, []string{"k-one", "k-two", "k-three"}) {
		t.Errorf("secrets from files: admin set %v, keys %d", c.Secrets.AdminToken != "", len(c.Secrets.APIKeys))
	}
	err := c.ApplyEnv(envMap(map[string]string{"GRADIOPOOL_ADMIN_TOKEN_FILE": tok, "GRADIOPOOL_ADMIN_TOKEN": "x"}))
	if err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("variable and file both set: %v", err)
	}
	err = c.ApplyEnv(envMap(map[string]string{"GRADIOPOOL_API_KEYS_FILE": filepath.Join(dir, "missing")}))
	if err == nil || !strings.Contains(err.Error(), "GRADIOPOOL_API_KEYS_FILE") {
		t.Errorf("missing keys file: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "t0ken") {
		t.Error("a secret in the error")
	}
}
