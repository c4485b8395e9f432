package redistest

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a real redis-server that a test can stop and start again on
// the same address, to play a Redis outage. It keeps nothing on disk, so a
// restart comes back empty, like a Redis without persistence.
type Server struct {
	Addr string

	t    testing.TB
	path string
	port string
	dir  string

	mu  sync.Mutex // guards cmd
	cmd *exec.Cmd  // nil while stopped
}

// StartServer starts a redis-server that lives until the test ends. It
// needs the real server: without one the test is skipped (failed when
// GRADIOPOOL_REQUIRE_REDIS=1), since miniredis cannot play an outage.
func StartServer(t testing.TB) *Server {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("GRADIOPOOL_REQUIRE_REDIS") == "1" {
			t.Fatal("redistest: GRADIOPOOL_REQUIRE_REDIS=1 but redis-server is not installed")
		}
		t.Skip("redistest: redis-server is not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	s := &Server{Addr: addr, t: t, path: path, port: port, dir: t.TempDir()}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Start starts the server again after Stop (a no-op while it runs) and
// waits until it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cmd := exec.Command(s.path, "--port", s.port, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", s.dir)
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			s.t.Fatalf("redistest: starting redis-server: %v", err)
		}
		ready := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(out)
			ok := false
			for sc.Scan() {
				if !ok && strings.Contains(sc.Text(), "Ready to accept connections") {
					ok = true
					ready <- true
				}
			}
			if !ok {
				ready <- false // exited first (the port still in use)
			}
		}()
		select {
		case ok := <-ready:
			if ok {
				s.cmd = cmd
				return
			}
		case <-time.After(10 * time.Second):
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: redis-server on %s did not start", s.Addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server (clients see connections refused until Start).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}
