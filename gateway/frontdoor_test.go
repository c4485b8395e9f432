package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// frontGateway is the gateway over a real pool of n simulated replicas
// with Gradio's default concurrency (one call at a time per endpoint, as
// the conformance suite expects), reached through its Gradio front door.
func frontGateway(t *testing.T, n int, mod func(*gateway.Config)) (*httptest.Server, *gateway.Gateway, []*gradiotest.Server, *pool.Pool) {
	t.Helper()
	var sims []*gradiotest.Server
	var urls []string
	for range n {
		s := gradiotest.NewUnstartedServer(nil)
		s.StepDelay = 5 * time.Millisecond
		s.Start()
		t.Cleanup(s.Close)
		sims = append(sims, s)
		urls = append(urls, s.URL)
	}
	cfg := gateway.Config{Replicas: urls, Pool: gateway.PoolConfig{MinConnections: 1, MaxConnections: 8}}
	if mod != nil {
		mod(&cfg)
	}
	metrics := gateway.NewMetrics(nil)
	p, err := pool.New(cfg.PoolConfig(nil, metrics))
	if err != nil {
		t.Fatal(err)
	}
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	g := gateway.New(cfg, b, nil, metrics)
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = g.Close(context.Background())
		_ = p.Close(context.Background())
	})
	return srv, g, sims, p
}

// jsCheck is one line of conformance.mjs.
type jsCheck struct {
	Name    string          `json:"name"`
	OK      bool            `json:"ok"`
	Skipped bool            `json:"skipped"`
	Detail  json.RawMessage `json:"detail"`
}

// nodeOrSkip finds node and the installed official client, or skips (a
// failure under GRADIOPOOL_REQUIRE_NODE=1, as in make test).
func nodeOrSkip(t *testing.T) (node, dir string) {
	t.Helper()
	skip := func(msg string) {
		if os.Getenv("GRADIOPOOL_REQUIRE_NODE") == "1" {
			t.Fatal(msg + " (GRADIOPOOL_REQUIRE_NODE=1)")
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node not found in PATH: the official JS client tests need Node 20+")
	}
	dir, err = filepath.Abs(filepath.Join("..", "testdata", "jsclient"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@gradio", "client", "package.json")); err != nil {
		skip("@gradio/client is not installed: run `npm ci` in testdata/jsclient (make jsclient)")
	}
	return node, dir
}

// runNode runs a script of testdata/jsclient and returns its stdout lines
// as checks; the bound is a hang guard.
func runNode(t *testing.T, script string, args ...string) []jsCheck {
	t.Helper()
	node, dir := nodeOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish (hang guard)\nstdout:\n%s\nstderr:\n%s", script, stdout.String(), stderr.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	var out []jsCheck
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var c jsCheck
		if err := json.Unmarshal(line, &c); err != nil {
			t.Errorf("unparsable line from %s: %s", script, line)
			continue
		}
		out = append(out, c)
	}
	if t.Failed() || len(out) == 0 {
		t.Logf("%s stderr:\n%s", script, stderr.String())
	}
	return out
}

// TestFrontDoorJSConformance runs the official @gradio/client 2.7.0
// conformance suite against one simulated replica and then against the
// gateway in front of three, and requires every check that passes against
// the replica to pass through the gateway.
func TestFrontDoorJSConformance(t *testing.T) {
	nodeOrSkip(t)
	srv, g, sims, _ := frontGateway(t, 3, nil)
	// The same flags both times. Not --sim: the gateway does not serve the
	// simulator's /_sim/ control routes (the server-side effects of cancel
	// are checked by TestFrontDoorCancelStopsReplicaJob instead).
	sticky := []string{"--sticky-header", gateway.UserHeader + ": conformance@example.com"}
	base := runNode(t, "conformance.mjs", append([]string{sims[0].URL}, sticky...)...)
	front := runNode(t, "conformance.mjs", append([]string{srv.URL}, sticky...)...)

	got := map[string]jsCheck{}
	for _, c := range front {
		got[c.Name] = c
	}
	passedBase := 0
	for _, c := range base {
		if !c.OK || c.Skipped {
			continue
		}
		passedBase++
		t.Run(c.Name, func(t *testing.T) {
			fc, ok := got[c.Name]
			switch {
			case !ok:
				t.Errorf("passes against one replica, did not run through the gateway")
			case fc.Skipped:
				t.Errorf("passes against one replica, skipped through the gateway: %s", fc.Detail)
			case !fc.OK:
				t.Errorf("passes against one replica, fails through the gateway: %s", fc.Detail)
			default:
				t.Logf("%s", fc.Detail)
			}
		})
	}
	for _, must := range []string{"connect", "view_api", "predict/upper", "predict/reverse_file", "state/same_client",
		"state/session_hash_option", "error/gr_error", "submit/count_generator", "cancel/running_job", "cancel/queued_job"} {
		if c, ok := got[must]; !ok || !c.OK || c.Skipped {
			t.Errorf("check %s did not pass through the gateway: %+v", must, c)
		}
	}
	if passedBase < 20 {
		t.Errorf("only %d checks passed against one replica: the baseline run is broken", passedBase)
	}
	// The sessions were spread: more than one replica ran calls.
	used := 0
	for _, s := range sims[:] {
		if n := s.Executions("upper"); n > 0 {
			used++
		}
	}
	st := g.FrontDoor().Stats()
	t.Logf("front door after the suite: %+v; replicas that ran upper (replica 0 also served the baseline run): %d", st, used)
	if st.Joins == 0 || st.Created == 0 {
		t.Errorf("front door stats %+v: no joins counted", st)
	}
	pinned := 0
	for _, n := range st.Pinned {
		if n > 0 {
			pinned++
		}
	}
	if pinned < 2 {
		t.Errorf("sessions pinned to %d replica(s), want them spread over several: %+v", pinned, st.Pinned)
	}
}
