package pool_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// bubble runs f inside a synctest bubble with n simulated replicas on an
// in-memory network, and a pool over them configured by cfg.
func bubble(t *testing.T, n int, cfg pool.Config, f func(t *testing.T, p *pool.Pool, srvs []*gradiotest.Server)) {
	synctest.Test(t, func(t *testing.T) {
		pn := newPipeNet()
		srvs := make([]*gradiotest.Server, n)
		for i := range srvs {
			s := gradiotest.NewUnstartedServer(nil)
			s.Listener.Close()
			l := pn.listen()
			s.Listener = l
			s.DefaultConcurrencyLimit = -1
			s.Start()
			srvs[i] = s
			cfg.Replicas = append(cfg.Replicas, l.url())
		}
		hc := pn.httpClient()
		cfg.ClientOptions = append(cfg.ClientOptions, gradio.WithHTTPClient(hc))
		if cfg.MinConnections == 0 {
			cfg.MinConnections = 1
		}
		p, err := pool.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if err := p.Close(context.Background()); err != nil {
					t.Errorf("Close: %v", err)
				}
				for _, s := range srvs {
					s.Close()
				}
				hc.Transport.(*http.Transport).CloseIdleConnections()
			}()
			f(t, p, srvs)
		}()
		synctest.Wait()
	})
}

func TestAssignmentTTL(t *testing.T) {
	rec := &recorder{}
	bubble(t, 2, pool.Config{OnEvent: rec.hook}, func(t *testing.T, p *pool.Pool, srvs []*gradiotest.Server) {
		ctx := context.Background()
		call := func(u string) string {
			t.Helper()
			res, err := p.Predict(ctx, u, "upper", "x")
			if err != nil {
				t.Fatal(err)
			}
			return res.Replica
		}
		a := call("a@example.com") // round robin: replica 0
		b := call("b@example.com") // replica 1
		if a == b {
			t.Fatalf("two new users on one replica %s", a)
		}
		// Every call refreshes the 1 h assignment: 59 min apart, a stays.
		for range 3 {
			time.Sleep(59 * time.Minute)
			if got := call("a@example.com"); got != a {
				t.Fatalf("after 59 min a moved from %s to %s", a, got)
			}
		}
		if n := p.Stats(t.Context()).UserAssignments; n != 1 {
			t.Errorf("userAssignments = %d, want 1 (b expired)", n)
		}
		time.Sleep(time.Hour + 2*time.Minute) // past the TTL and a sweep
		synctest.Wait()
		st := p.Stats(t.Context())
		if st.UserAssignments != 0 {
			t.Errorf("userAssignments = %d after the TTL, want 0", st.UserAssignments)
		}
		// Health checks ran meanwhile (every 5 min by default).
		if st.LastHealthCheck == nil || st.HealthCheckRunning {
			t.Errorf("lastHealthCheck %v, running %v", st.LastHealthCheck, st.HealthCheckRunning)
		}
		// a is a new user again: assigned afresh (an EventAssigned without
		// Previous), by round robin.
		before := rec.count(pool.EventAssigned, "")
		call("a@example.com")
		if rec.count(pool.EventAssigned, "") != before+1 {
			t.Error("expired user was not assigned again")
		}
	})
}

func TestStickySessions(t *testing.T) {
	bubble(t, 2, pool.Config{StickySessions: true}, func(t *testing.T, p *pool.Pool, srvs []*gradiotest.Server) {
		ctx := context.Background()
		counter := func(u, item string) string {
			t.Helper()
			res, err := p.Predict(ctx, u, "counter", item)
			if err != nil {
				t.Fatal(err)
			}
			return str(t, res.Data[0])
		}
		// Each user keeps their own gr.State across calls.
		if got := counter("a@example.com", "x"); got != "1 items: x" {
			t.Errorf("first = %q", got)
		}
		if got := counter("b@example.com", "p"); got != "1 items: p" {
			t.Errorf("b first = %q", got)
		}
		time.Sleep(30 * time.Minute)
		if got := counter("a@example.com", "y"); got != "2 items: x, y" {
			t.Errorf("second = %q", got)
		}
		if got := counter("b@example.com", "q"); got != "2 items: p, q" {
			t.Errorf("b second = %q", got)
		}
		// Anonymous callers never see a user's state.
		res, err := p.Predict(ctx, "", "counter", "anon")
		if err != nil || str(t, res.Data[0]) != "1 items: anon" {
			t.Errorf("anonymous = %v %v", res, err)
		}
		if n := p.Stats(t.Context()).StickySessions; n != 2 {
			t.Errorf("stickySessions = %d, want 2", n)
		}

		// While a's session is busy, a's next call waits for it.
		l, err := p.Acquire(ctx, "a@example.com")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan string)
		go func() { done <- counter("a@example.com", "z") }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("a's second call did not wait for a's busy session")
		default:
		}
		if q := p.Stats(t.Context()).TotalQueued; q != 1 {
			t.Errorf("totalQueued = %d while a waits, want 1", q)
		}
		l.Release()
		if got := <-done; got != "3 items: x, y, z" {
			t.Errorf("third = %q", got)
		}

		// After the TTL without calls the session (and its state) is gone.
		time.Sleep(time.Hour + 2*time.Minute)
		synctest.Wait()
		if n := p.Stats(t.Context()).StickySessions; n != 0 {
			t.Errorf("stickySessions = %d after the TTL", n)
		}
		if got := counter("a@example.com", "new"); got != "1 items: new" {
			t.Errorf("after the TTL = %q", got)
		}
	})
}
