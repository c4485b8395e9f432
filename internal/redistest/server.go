package redistest

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
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

	conf string   // a configuration file, first argument when set
	args []string // extra arguments of every start

	mu  sync.Mutex // guards cmd
	cmd *exec.Cmd  // nil while stopped
}

// StartServer starts a redis-server that lives until the test ends, with
// extra command-line arguments args (e.g. "--replicaof", host, port). It
// needs the real server: without one the test is skipped (failed when
// GRADIOPOOL_REQUIRE_REDIS=1), since miniredis cannot play an outage.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	path := serverPath(t)
	s := &Server{t: t, path: path, dir: t.TempDir(), args: args}
	s.port = FreePort(t)
	s.Addr = "127.0.0.1:" + s.port
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// serverPath finds redis-server or skips (fails) the test.
func serverPath(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("GRADIOPOOL_REQUIRE_REDIS") == "1" {
			t.Fatal("redistest: GRADIOPOOL_REQUIRE_REDIS=1 but redis-server is not installed")
		}
		t.Skip("redistest: redis-server is not installed")
	}
	return path
}

// StartSentinel starts a Sentinel (redis-server --sentinel) with the
// configuration file conf (Sentinel rewrites it: give a file in
// t.TempDir()), on a port of its own.
func StartSentinel(t testing.TB, conf string) *Server {
	t.Helper()
	s := &Server{t: t, path: serverPath(t), dir: t.TempDir(), conf: conf, args: []string{"--sentinel"}}
	s.port = FreePort(t)
	s.Addr = "127.0.0.1:" + s.port
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// FreePort returns a loopback port free right now (redis-server needs the
// number; the race with other listeners is harmless on loopback).
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
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
		var argv []string
		if s.conf != "" {
			argv = append(argv, s.conf)
		}
		argv = append(argv, "--port", s.port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir)
		cmd := exec.Command(s.path, append(argv, s.args...)...)
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			s.t.Fatalf("redistest: starting redis-server: %v", err)
		}
		ready := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(out)
			ok := false
			for sc.Scan() {
				if line := sc.Text(); !ok && (strings.Contains(line, "Ready to accept connections") || strings.Contains(line, "Sentinel ID is")) {
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

// Freeze stops the server's process (SIGSTOP) without closing its
// connections: a hung Redis, whose clients wait for answers that never
// come. Thaw resumes it.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Stop kills the server (clients see connections refused until Start).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a frozen process dies only once resumed
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}
