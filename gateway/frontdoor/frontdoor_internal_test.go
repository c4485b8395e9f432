package frontdoor

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is an injected clock: hours pass in no time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestDoor(t *testing.T, cfg Config) *FrontDoor {
	t.Helper()
	f, err := New(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// poolOver is a pool over the replica at url with at most max sessions,
// closed at the end of the test (a leaked slot would hold Close: bounded).
func poolOver(t *testing.T, url string, max int) *pool.Pool {
	t.Helper()
	p, err := pool.New(pool.Config{Replicas: []string{url}, MinConnections: -1, MaxConnections: max, QueueTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

func TestSessionsExpireWhenIdleWithoutStreams(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := newTestDoor(t, Config{SessionTTL: time.Hour, Now: clk.now})
	ctx := context.Background()

	idle := f.session(ctx, "idle", "", true)
	idle.setBinding(binding{Replica: "r1", Backend: "gp1"})
	idle.mu.Lock()
	idle.accepted = 1 // a call ran there: its gr.State is worth keeping
	idle.mu.Unlock()
	streaming := f.session(ctx, "streaming", "", true)
	streaming.setBinding(binding{Replica: "r2", Backend: "gp2"})
	streaming.mu.Lock()
	streaming.accepted = 1
	streaming.mu.Unlock()
	endStream := streaming.stream(false) // e.g. the caller's heartbeat

	clk.add(59 * time.Minute)
	f.sweep()
	if st := f.Stats(); st.Open != 2 || st.Expired != 0 {
		t.Fatalf("after 59 min: %+v, want both sessions", st)
	}
	clk.add(2 * time.Minute)
	f.sweep()
	if st := f.Stats(); st.Open != 1 || st.Expired != 1 {
		t.Fatalf("after 61 min: %+v, want the idle session expired", st)
	}
	if f.session(ctx, "idle", "", false) != nil {
		t.Error("an expired session is still found")
	}

	clk.add(5 * time.Hour) // an open stream keeps a session however long
	f.sweep()
	if st := f.Stats(); st.Open != 1 {
		t.Fatalf("with its heartbeat open: %+v, want the session kept", st)
	}
	endStream() // the heartbeat ends: the TTL starts now
	clk.add(59 * time.Minute)
	f.sweep()
	if st := f.Stats(); st.Open != 1 {
		t.Fatalf("59 min after its stream closed: %+v", st)
	}
	clk.add(time.Minute)
	f.sweep()
	if st := f.Stats(); st.Open != 0 || st.Expired != 2 {
		t.Fatalf("60 min after its stream closed: %+v", st)
	}
}

func TestSessionOwnedByItsCredentials(t *testing.T) {
	f := newTestDoor(t, Config{})
	ctx := context.Background()
	if f.session(ctx, "s1", "alice-key", true) == nil {
		t.Fatal("no session")
	}
	if f.session(ctx, "s1", "mallory-key", true) != nil {
		t.Error("another caller's credentials reached the session")
	}
	if f.session(ctx, "s1", "", false) != nil {
		t.Error("a caller without credentials reached the session")
	}
}

func TestFileURLsAreSignedCapabilities(t *testing.T) {
	f := newTestDoor(t, Config{HashKey: []byte("k")})
	f.fileIDs = []string{"a", "b"}
	rw := f.newRewriter([]string{"http://10.0.0.1:7860"}, 1, "https://gw.example", "/gradio_api")
	in := `{"msg":"process_completed","event_id":"e","output":{"data":[{"path":"/tmp/gradio/x y/f.bin","url":"http://10.0.0.1:7860/gradio_api/file=/tmp/gradio/x y/f.bin","size":3,"orig_name":"f.bin","mime_type":null,"is_stream":false,"meta":{"_type":"gradio.FileData"}}]},"success":true}`
	out := string(rw.rewrite([]byte(in)))
	vp := f.virtualPath(1, "/tmp/gradio/x y/f.bin")
	if !strings.Contains(out, `"path":"`+vp+`"`) || !strings.Contains(out, `"url":"https://gw.example/gradio_api/file=`+vp+`"`) {
		t.Fatalf("rewritten: %s", out)
	}
	if strings.Contains(out, "10.0.0.1") {
		t.Errorf("the replica's address leaked: %s", out)
	}
	// Everything but the two fields is byte for byte the same.
	if strings.Replace(strings.Replace(out, vp, "/tmp/gradio/x y/f.bin", 1), "https://gw.example/gradio_api/file="+vp, "http://10.0.0.1:7860/gradio_api/file=/tmp/gradio/x y/f.bin", 1) != in {
		t.Errorf("other bytes changed:\n%s\n%s", in, out)
	}
	if idx, p, ok := f.verifyFile(vp); !ok || idx != 1 || p != "/tmp/gradio/x y/f.bin" {
		t.Errorf("verify(%s) = %d %q %v", vp, idx, p, ok)
	}
	for _, bad := range []string{
		"/gradiopool/1/AAAAAAAAAAAAAAAAAAAAAA/tmp/gradio/x y/f.bin", // forged signature
		strings.Replace(vp, "/gradiopool/1/", "/gradiopool/0/", 1),  // signed for replica 1, asked of 0
		strings.Replace(vp, "f.bin", "g.bin", 1),                    // another file
		"/gradiopool/1/" + f.sign(1, "/etc/passwd") + "/../etc/passwd",
		"/etc/passwd",
		"/gradiopool/9/" + f.sign(9, "/x") + "/x", // no such replica
	} {
		if _, _, ok := f.verifyFile(bad); ok {
			t.Errorf("verify accepted %q", bad)
		}
	}
}

func TestValidHash(t *testing.T) {
	for h, want := range map[string]bool{"abc123": true, "a-b_c.d": true, "": false, "a b": false, "a/b": false, strings.Repeat("a", 129): false} {
		if validHash(h) != want {
			t.Errorf("validHash(%q) = %v", h, !want)
		}
	}
}

// TestCompletionBeforeJoinAnswerFreesTheSlot: the replica can run a call
// and stream its process_completed before the gateway has handled the
// join's answer; the slot is then freed when the answer is handled, not
// held for ever.
func TestCompletionBeforeJoinAnswerFreesTheSlot(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	defer sim.Close()
	p := poolOver(t, sim.URL, 1)
	f := newTestDoor(t, Config{})
	ctx := context.Background()
	s := f.session(ctx, "early", "", true)
	name := p.Replicas()[0]
	for i := range 3 {
		l, err := p.Reserve(ctx, "", pool.ReserveOptions{Replica: name})
		if err != nil {
			t.Fatalf("call %d: %v (the slot of the previous call was not freed)", i, err)
		}
		id := fmt.Sprintf("e%d", i)
		s.complete(id, "") // its process_completed passed first
		s.addPending(id, l, &call{replica: name, via: relay{f}})
		if st := p.Stats(ctx).Pools[name]; st.InUseConnections != 0 {
			t.Fatalf("call %d: %d sessions in use after it completed", i, st.InUseConnections)
		}
	}
	if n := len(s.callsOn("", false)); n != 0 {
		t.Errorf("%d calls still in flight", n)
	}
}

// TestFileIDsSurviveReload: a replica added by a reload gets the next file
// number, the numbers handed out before keep their meaning, and a number
// never given is refused.
func TestFileIDsSurviveReload(t *testing.T) {
	f := newTestDoor(t, Config{HashKey: []byte("k")})
	f.fileIDs = []string{"a", "b"}
	if i := f.replicaIndex("c"); i != 2 {
		t.Fatalf("index of an added replica = %d, want 2", i)
	}
	if i := f.replicaIndex("a"); i != 0 {
		t.Errorf("index of a = %d, want 0", i)
	}
	vp := f.virtualPath(2, "/tmp/gradio/f.bin")
	if idx, _, ok := f.verifyFile(vp); !ok || idx != 2 {
		t.Errorf("verify(%s) = %d %v", vp, idx, ok)
	}
	if _, _, ok := f.verifyFile(f.virtualPath(3, "/tmp/gradio/f.bin")); ok {
		t.Error("a file number never given was accepted")
	}
}

// TestStatelessSessionsExpireInMinutes: a session no call ran on (made by
// a heartbeat, or whose joins were refused) and without a stream goes
// after a couple of minutes, not session_ttl.
func TestStatelessSessionsExpireInMinutes(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := newTestDoor(t, Config{Now: clk.now}) // the default session_ttl, 1 h
	ctx := context.Background()
	f.session(ctx, "unused", "", true)
	clk.add(time.Minute)
	f.sweep()
	if st := f.Stats(); st.Open != 1 {
		t.Fatalf("after 1 min: %+v, want the session kept", st)
	}
	clk.add(time.Minute)
	f.sweep()
	if st := f.Stats(); st.Open != 0 || st.Expired != 1 {
		t.Fatalf("after 2 min: %+v, want the unused session expired", st)
	}
}

// TestSessionCapCountsLiveSessions: at the default per-client cap (500), a
// burst of sessions from one client refuses that client's next session
// only while they are live: a minute after their last request, idle ones
// (no stream, no call) make room, and one with a stream open never does.
func TestSessionCapCountsLiveSessions(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := newTestDoor(t, Config{Now: clk.now})
	ctx := context.Background()
	const client = "addr:127.0.0.1"
	var keep func()
	for i := range DefaultMaxSessionsPerClient {
		s, err := f.sessionFor(ctx, fmt.Sprintf("burst%d", i), "", client, true)
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		if i == 0 {
			keep = s.stream(false) // a page with its heartbeat open
		}
	}
	defer keep()
	if _, err := f.sessionFor(ctx, "webapp", "", client, true); err == nil {
		t.Fatal("a session past the cap was made while the burst is live")
	}
	clk.add(59 * time.Second)
	if _, err := f.sessionFor(ctx, "webapp", "", client, true); err == nil {
		t.Fatal("a session past the cap was made 59 s after the burst")
	}
	clk.add(2 * time.Second)
	if s, err := f.sessionFor(ctx, "webapp", "", client, true); err != nil || s == nil {
		t.Fatalf("a minute after the burst the client's new session was refused: %v", err)
	}
	if f.session(ctx, "burst0", "", false) == nil {
		t.Error("the session with a stream open was evicted")
	}
	if f.session(ctx, "burst1", "", false) != nil {
		t.Error("an idle session of the burst is still there")
	}
}

// setBinding makes b the session's binding (tests set one up directly).
func (s *callerSession) setBinding(b binding) {
	s.mu.Lock()
	s.bindLocked(b)
	s.mu.Unlock()
}
