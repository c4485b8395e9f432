package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// ChildEnv is the environment variable that turns a process into one of the
// harness's helper processes (see RunChild). Its value names the role;
// ChildConfigEnv carries the role's JSON configuration.
const (
	ChildEnv       = "GRADIOPOOL_BENCH_CHILD"
	ChildConfigEnv = "GRADIOPOOL_BENCH_CHILD_CONFIG"
)

// RunChild runs this process as a helper process of the harness when
// ChildEnv is set, and reports whether it did. The harness starts helpers by
// re-running its own executable (Options.Self) so that the simulated
// replicas and each measured client live in processes of their own: a
// memory or CPU figure then belongs to one program only.
//
// A program that wants the harness to measure out of process calls
// RunChild first thing (cmd/gradiopool-bench does, and so does the package's
// TestMain).
func RunChild(ctx context.Context, stdout io.Writer) (bool, error) {
	role := os.Getenv(ChildEnv)
	if role == "" {
		return false, nil
	}
	cfg := os.Getenv(ChildConfigEnv)
	switch role {
	case "sim":
		return true, childSim(ctx, cfg, stdout)
	case "goclient":
		return true, childGoClient(ctx, cfg, stdout)
	case "callers":
		return true, childCallers(ctx, cfg, stdout)
	}
	return true, fmt.Errorf("bench: unknown child role %q", role)
}

// simSpec configures a set of simulated replicas.
type simSpec struct {
	Replicas    int           `json:"replicas"`
	ConnectCost time.Duration `json:"connect_cost"`
	Latency     time.Duration `json:"latency"`
	// Concurrency is each endpoint's concurrency limit; 0 means
	// unlimited (the pool's limit is then the cap).
	Concurrency int `json:"concurrency,omitempty"`
}

// sims is a running set of simulated replicas, in this process or in a
// child process.
type sims struct {
	URLs    []string
	Remote  bool // in a child process
	servers []*gradiotest.Server
	cmd     *exec.Cmd
	stdin   io.Closer
}

// startSims starts spec.Replicas simulated replicas of the default app with
// unlimited concurrency (so that the pool's session limit, not the app's,
// is the cap). With a Self command they run in a helper process, so that
// their CPU time is scheduled apart and their garbage is collected apart
// from the measured process; without one they run in this process.
func (e *env) startSims(ctx context.Context, spec simSpec) (*sims, error) {
	if len(e.opts.Self) > 0 {
		return e.startRemoteSims(ctx, spec)
	}
	s := &sims{}
	for range spec.Replicas {
		srv := newSim(spec)
		s.servers = append(s.servers, srv)
		s.URLs = append(s.URLs, srv.URL)
	}
	return s, nil
}

func newSim(spec simSpec) *gradiotest.Server {
	srv := gradiotest.NewUnstartedServer(nil)
	srv.ConnectCost = spec.ConnectCost
	srv.Latency = spec.Latency
	srv.DefaultConcurrencyLimit = -1
	if spec.Concurrency > 0 {
		srv.DefaultConcurrencyLimit = spec.Concurrency
	}
	srv.Start()
	return srv
}

func (e *env) startRemoteSims(ctx context.Context, spec simSpec) (*sims, error) {
	b, _ := json.Marshal(spec)
	cmd := e.childCommand(ctx, "sim", string(b))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sim process: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stdin.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("sim process: %w", err)
	}
	var out struct{ URLs []string }
	if err := json.Unmarshal([]byte(line), &out); err != nil || len(out.URLs) != spec.Replicas {
		stdin.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("sim process printed %q", strings.TrimSpace(line))
	}
	return &sims{URLs: out.URLs, Remote: true, cmd: cmd, stdin: stdin}, nil
}

// Close stops the replicas.
func (s *sims) Close() {
	for _, srv := range s.servers {
		srv.Close()
	}
	if s.cmd != nil {
		s.stdin.Close() // the child exits when its stdin ends
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
	}
}

// childCommand re-runs this program as a helper process.
func (e *env) childCommand(ctx context.Context, role, config string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.opts.Self[0], e.opts.Self[1:]...)
	cmd.Env = append(os.Environ(), ChildEnv+"="+role, ChildConfigEnv+"="+config)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// childSim serves simulated replicas until stdin ends or ctx is done.
func childSim(ctx context.Context, config string, stdout io.Writer) error {
	var spec simSpec
	if err := json.Unmarshal([]byte(config), &spec); err != nil {
		return fmt.Errorf("bench: sim child config: %w", err)
	}
	var urls []string
	var servers []*gradiotest.Server
	for range spec.Replicas {
		srv := newSim(spec)
		servers = append(servers, srv)
		urls = append(urls, srv.URL)
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	b, _ := json.Marshal(map[string]any{"urls": urls})
	fmt.Fprintf(stdout, "%s\n", b)
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// running returns how many calls the replicas' handlers are running now,
// from each replica's GET /_sim/state (-1 if a replica did not answer).
func (s *sims) running(ctx context.Context) int {
	total := 0
	for _, u := range s.URLs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/_sim/state", nil)
		if err != nil {
			return -1
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return -1
		}
		var st struct {
			Running int `json:"running"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			return -1
		}
		total += st.Running
	}
	return total
}

// waitRunning waits until the replicas run n calls at once, or until
// deadline, and returns the last count seen.
func (s *sims) waitRunning(ctx context.Context, n int, deadline time.Time) int {
	for {
		got := s.running(ctx)
		if got >= n || !time.Now().Before(deadline) || ctx.Err() != nil {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}
