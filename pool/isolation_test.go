package pool_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestNoStateCrossesCallers is the isolation rule: a call that is not a
// sticky user's runs on a session hash no other caller has used, so the
// simulator's counter (gr.State: a list per session) always starts empty.
// One replica with one session forces every call onto the same pooled
// session: without a fresh hash per lease, dave would read alice's item.
func TestNoStateCrossesCallers(t *testing.T) {
	srvs := replicas(t, 1)
	for _, sticky := range []bool{false, true} {
		name := map[bool]string{false: "default", true: "sticky"}[sticky]
		t.Run(name, func(t *testing.T) {
			p := newPool(t, pool.Config{Replicas: urls(srvs), MinConnections: 1, MaxConnections: 1, StickySessions: sticky})
			ctx := ctxT(t)
			predict := func(u, item string) string {
				t.Helper()
				res, err := p.Predict(ctx, u, "counter", item)
				if err != nil {
					t.Fatal(err)
				}
				return str(t, res.Data[0])
			}
			submit := func(u, item string) string {
				t.Helper()
				c, err := p.Submit(ctx, u, "counter", item)
				if err != nil {
					t.Fatal(err)
				}
				out, err := c.Wait(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return str(t, out[0])
			}
			leased := func(u, item string) string {
				t.Helper()
				var got string
				err := pool.AcquireFunc(ctx, p, u, func(c *gradio.Client) error {
					out, err := c.Predict(ctx, "counter", item)
					if err == nil {
						got = str(t, out[0])
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			for _, call := range []struct {
				name string
				f    func(u, item string) string
			}{{"Predict", predict}, {"Submit", submit}, {"Acquire", leased}} {
				if got := call.f("alice@example.com", "alice-secret"); got != "1 items: alice-secret" && !sticky {
					t.Errorf("%s alice = %q", call.name, got)
				}
				if got := call.f("dave@example.com", "dave-item"); !sticky && got != "1 items: dave-item" {
					t.Errorf("%s dave = %q: another caller's state leaked", call.name, got)
				}
				for _, item := range []string{"anon-1", "anon-2"} {
					if got := call.f("", item); got != "1 items: "+item {
						t.Errorf("%s anonymous = %q: another caller's state leaked", call.name, got)
					}
				}
			}
			if sticky {
				// Signed-in users keep their own state across calls (three
				// calls each above), and only theirs.
				if got := predict("alice@example.com", "again"); got != "4 items: alice-secret, alice-secret, alice-secret, again" {
					t.Errorf("sticky alice = %q", got)
				}
				if got := predict("dave@example.com", "again"); got != "4 items: dave-item, dave-item, dave-item, again" {
					t.Errorf("sticky dave = %q", got)
				}
			}
		})
	}
}

// TestLeaseSessionClosedAtRelease checks a lease's own session does not
// outlive it: calling through it after Release fails instead of reaching
// the app with a hash another caller could be given.
func TestLeaseSessionClosedAtRelease(t *testing.T) {
	srvs := replicas(t, 1)
	p := newPool(t, pool.Config{Replicas: urls(srvs), MaxConnections: 1})
	ctx := ctxT(t)
	l, err := p.Acquire(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	c := l.Client()
	if _, err := c.Predict(ctx, "upper", "x"); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if _, err := c.Predict(context.Background(), "upper", "x"); err == nil {
		t.Error("a released lease's session still calls the app")
	}
	l2, err := p.Acquire(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release()
	if l2.Client().SessionHash() == c.SessionHash() {
		t.Error("the next lease got the previous caller's session hash")
	}
}

// TestEventsOutliveTheLeaseSession: a call's session is closed when its
// job ends, but a caller still reading the job's events (a gateway
// relaying them to a slow client) gets every one of them.
func TestEventsOutliveTheLeaseSession(t *testing.T) {
	s := gradiotest.NewUnstartedServer(nil)
	s.StepDelay = -1 // the whole generator runs before the first event is read
	s.Start()
	t.Cleanup(s.Close)
	p := newPool(t, pool.Config{Replicas: []string{s.URL}, MaxConnections: 1})
	ctx := ctxT(t)
	c, err := p.Submit(ctx, "", "count", 3)
	if err != nil {
		t.Fatal(err)
	}
	events := c.Events()
	first := <-events
	if _, err := c.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the lease end and its session close
	kinds := []string{first.Kind.String()}
	for ev := range events {
		kinds = append(kinds, ev.Kind.String())
	}
	if got := strings.Join(kinds, " "); got != "queued started output output output completed" {
		t.Errorf("events %q: some were lost when the lease's session closed", got)
	}
}

// TestPoolSessionsOpenNoHeartbeat: the simulator's app has gr.State, so
// its config asks for a heartbeat (connect_heartbeat), which a bare
// gradio.Client opens; the pool's sessions do not (each would hold a
// goroutine and a connection for its call), plain and sticky alike,
// unless ClientOptions asks for it.
func TestPoolSessionsOpenNoHeartbeat(t *testing.T) {
	for _, tt := range []struct {
		name   string
		sticky bool
		opts   []gradio.Option
		want   bool
	}{
		{"default", false, nil, false},
		{"sticky", true, nil, false},
		{"asked", false, []gradio.Option{gradio.WithHeartbeat(true)}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srvs := replicas(t, 1)
			p := newPool(t, pool.Config{Replicas: urls(srvs), MaxConnections: 2, StickySessions: tt.sticky, ClientOptions: tt.opts})
			ctx := ctxT(t)
			for i := range 3 {
				if _, err := p.Predict(ctx, user(i), "upper", "x"); err != nil {
					t.Fatal(err)
				}
			}
			if tt.want {
				// The heartbeat request is sent by a goroutine of its own:
				// it may reach the replica after the call's answer.
				waitUntil(t, func() bool { return srvs[0].Requests("heartbeat") > 0 })
				return
			}
			// Six sessions' calls (a fresh session each, or three users'
			// sticky ones used twice): with the app's default, each
			// session sends its heartbeat request while its call runs.
			for i := range 3 {
				if _, err := p.Predict(ctx, user(i), "upper", "y"); err != nil {
					t.Fatal(err)
				}
			}
			_ = p.Close(ctx)
			if n := srvs[0].Requests("heartbeat"); n != 0 {
				t.Errorf("%d heartbeat requests reached the replica, want none", n)
			}
		})
	}
}
