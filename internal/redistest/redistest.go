package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Start returns the host:port of a Redis server that lives until the test
// ends. Each call starts a server of its own, so tests never share keys.
func Start(t testing.TB) string {
	t.Helper()
	if path, err := exec.LookPath("redis-server"); err == nil {
		return startReal(t, path)
	}
	if os.Getenv("GRADIOPOOL_REQUIRE_REDIS") == "1" {
		t.Fatal("redistest: GRADIOPOOL_REQUIRE_REDIS=1 but redis-server is not installed")
	}
	return startMini(t)
}

// startReal runs redis-server on a free port with no persistence.
func startReal(t testing.TB, path string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close() // redis-server needs the port; the race with other listeners is harmless on loopback

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, path, "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("redistest: starting redis-server: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	ready := make(chan struct{})
	go func() { // read the log until it says it is ready, then drain it
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				close(ready)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("redistest: redis-server on %s did not become ready in 10s", addr)
	}
	return addr
}

// startMini runs miniredis. miniredis only ages keys when told to, so a
// ticker fast-forwards its clock in step with real time: the stores under
// test set real TTLs and expect them to expire.
func startMini(t testing.TB) string {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatal(fmt.Errorf("redistest: miniredis: %w", err))
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		const step = 10 * time.Millisecond
		tick := time.NewTicker(step)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				m.SetTime(now)
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		<-stopped
		m.Close()
	})
	return m.Addr()
}
