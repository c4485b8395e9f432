package fdtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The official JS client (@gradio/client, installed in testdata/jsclient
// by `make jsclient`) is the front door's real customer: these helpers run
// its scripts against a front door.

// JSCheck is one line of conformance.mjs.
type JSCheck struct {
	Name    string          `json:"name"`
	OK      bool            `json:"ok"`
	Skipped bool            `json:"skipped"`
	Detail  json.RawMessage `json:"detail"`
}

// NodeOrSkip finds node and testdata/jsclient with the official client
// installed, or skips the test: a machine without Node still runs every
// other test. Under GRADIOPOOL_REQUIRE_NODE=1 (make test, CI) a missing
// Node or client fails the test instead, so that they cannot go unrun.
func NodeOrSkip(t testing.TB) (node, dir string) {
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
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(root, "testdata", "jsclient")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@gradio", "client", "package.json")); err != nil {
		skip("@gradio/client is not installed: run `npm ci` in testdata/jsclient (make jsclient)")
	}
	return node, dir
}

// moduleRoot is the repository's root, found from the working directory
// (a test's is its package's directory) upwards: the first directory with
// gradiopool's go.mod, so the search never leaves the repository.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			if !strings.Contains(string(b), "module github.com/gradiopool/gradiopool\n") {
				return "", errors.New("fdtest: " + dir + "/go.mod is not gradiopool's")
			}
			return filepath.Abs(dir)
		}
		if filepath.Dir(dir) == dir {
			return "", errors.New("fdtest: no go.mod above " + wd)
		}
	}
}

// nodeCommand is node running script of testdata/jsclient with args,
// killed when timeout (a hang guard) passes; cancel releases its context.
func nodeCommand(t testing.TB, timeout time.Duration, script string, args ...string) (ctx context.Context, cmd *exec.Cmd, cancel context.CancelFunc) {
	t.Helper()
	node, dir := NodeOrSkip(t)
	ctx, cancel = context.WithTimeout(context.Background(), timeout)
	cmd = exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	return ctx, cmd, cancel
}

// NodeOutput runs a script of testdata/jsclient to its end and returns its
// stdout; it fails the test when the script fails. timeout is a hang guard.
func NodeOutput(t testing.TB, timeout time.Duration, script string, args ...string) []byte {
	t.Helper()
	_, cmd, cancel := nodeCommand(t, timeout, script, args...)
	defer cancel()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	return out
}

// NodeLive runs a script of testdata/jsclient, calling line for each line
// of its stdout as it comes (so that a test can act while the client
// waits), and returns the whole stdout; it fails the test when the script
// fails. timeout is a hang guard.
func NodeLive(t testing.TB, timeout time.Duration, line func([]byte), script string, args ...string) []byte {
	t.Helper()
	_, cmd, cancel := nodeCommand(t, timeout, script, args...)
	defer cancel()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		all.Write(sc.Bytes())
		all.WriteByte('\n')
		line(sc.Bytes())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", script, err, all.String(), stderr.String())
	}
	return all.Bytes()
}

// RunNode runs a script of testdata/jsclient that prints one JSCheck a
// line and returns them; a script that exits non-zero (a failed check)
// does not fail the test by itself: the caller judges the checks. The
// 4-minute bound is a hang guard.
func RunNode(t testing.TB, script string, args ...string) []JSCheck {
	t.Helper()
	ctx, cmd, cancel := nodeCommand(t, 4*time.Minute, script, args...)
	defer cancel()
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
	var out []JSCheck
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var c JSCheck
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

// JSStatus is a status event the JS client showed: what a user of an
// official client sees of the queue.
type JSStatus struct {
	Stage    string   `json:"stage"`
	Queue    bool     `json:"queue"`
	Position *int     `json:"position"`
	Size     *int     `json:"size"`
	ETA      *float64 `json:"eta"`
	Message  string   `json:"message"`
}

// JSQueueStatuses returns, of what queue_status.mjs printed, the first
// pending status with a queue position and the last status.
func JSQueueStatuses(out []byte) (queued, last *JSStatus) {
	for line := range strings.Lines(string(out)) {
		var m struct {
			Status *JSStatus `json:"status"`
		}
		if json.Unmarshal([]byte(line), &m) != nil || m.Status == nil {
			continue
		}
		last = m.Status
		if m.Status.Stage == "pending" && m.Status.Position != nil && queued == nil {
			queued = m.Status
		}
	}
	return queued, last
}

// CheckJSQueueStatus checks what queue_status.mjs printed of a call that
// waited in the gateway's queue until its time-out (one slot, taken): a
// pending status with queue, position 0 of 1 and an ETA, then an error
// status with the gateway's busy message.
func CheckJSQueueStatus(t testing.TB, out []byte) {
	t.Helper()
	queued, last := JSQueueStatuses(out)
	if queued == nil || !queued.Queue || *queued.Position != 0 || queued.Size == nil || *queued.Size != 1 || queued.ETA == nil || *queued.ETA <= 0 {
		t.Errorf("no pending status with queue, position 0 of 1 and an ETA; the JS client printed:\n%s", out)
	}
	if last == nil || last.Stage != "error" || !strings.Contains(last.Message, "gradiopool: all 1 replicas are busy; waited") {
		t.Errorf("the call did not end with the gateway's busy message; the JS client printed:\n%s", out)
	}
	if queued != nil && queued.ETA != nil {
		t.Logf("the JS client shows: position %d of %d, eta %.3fs; then %q", *queued.Position, *queued.Size, *queued.ETA, last.Message)
	}
}
