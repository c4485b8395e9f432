package pool_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/logbuf"
	"github.com/gradiopool/gradiopool/pool"
)

// preload queues n one-second calls on srv from a client outside the
// pool (another user of the Space); they end before the returned func
// returns.
func preload(t *testing.T, srv *gradiotest.Server, hc *http.Client, n int) (wait func()) {
	t.Helper()
	ctx := context.Background()
	c, err := gradio.Connect(ctx, srv.URL, gradio.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*gradio.Job
	for range n {
		j, err := c.Submit(ctx, "slow", 1)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	synctest.Wait()
	return func() {
		for _, j := range jobs {
			if _, err := j.Wait(ctx); err != nil {
				t.Errorf("preloaded call: %v", err)
			}
		}
		c.Close()
	}
}

// spread runs waves of concurrent anonymous one-second calls and counts
// the calls per replica.
func spread(t *testing.T, p *pool.Pool, waves, perWave int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range waves {
		res := make(chan string, perWave)
		for range perWave {
			go func() {
				r, err := p.Predict(context.Background(), "", "slow", 1)
				if err != nil {
					t.Errorf("call: %v", err)
					res <- ""
					return
				}
				res <- r.Replica
			}()
			synctest.Wait() // deterministic arrival order
		}
		for range perWave {
			got[<-res]++
		}
	}
	return got
}

// TestRouteBySpaceQueue: three replicas at Gradio's default concurrency of
// 1; the second already has ten one-second calls of another client queued.
// Once one call of ours has seen that queue, anonymous calls avoid the
// busy replica; routing by our own in-use count alone does not.
func TestRouteBySpaceQueue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		routing pool.Routing
		avoid   bool
	}{
		{"expected time", pool.RouteExpectedTime, true},
		{"least in use", pool.RouteLeastInUse, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := pool.Config{MinConnections: 1, MaxConnections: 4, QueueTimeout: time.Minute, Routing: tc.routing}
			bubbleWith(t, 3, cfg, nil, func(t *testing.T, p *pool.Pool, srvs []*gradiotest.Server, hc *http.Client) {
				busy := p.Replicas()[1]
				wait := preload(t, srvs[1], hc, 10)
				defer wait()

				// Discovery: one call per replica (ties go round robin).
				done := make(chan string, 3)
				for range 3 {
					go func() {
						r, err := p.Predict(context.Background(), "", "slow", 1)
						if err != nil {
							t.Errorf("discovery call: %v", err)
							done <- ""
							return
						}
						done <- r.Replica
					}()
					synctest.Wait()
				}
				rs := p.Stats(context.Background()).Pools[busy]
				if rs.SpaceQueue < 9 || rs.Endpoints["slow"].SpaceQueue < 9 {
					t.Fatalf("busy replica: spaceQueue %d, endpoints %+v; want the ten preloaded calls seen", rs.SpaceQueue, rs.Endpoints)
				}
				if rs.SpaceETA < 9 {
					t.Errorf("busy replica: spaceEtaSeconds %.1f, want about 11", rs.SpaceETA)
				}

				got := spread(t, p, 4, 3)
				if tc.avoid && got[busy] != 0 {
					t.Errorf("calls per replica %v: %d went to the busy replica %s", got, got[busy], busy)
				}
				if !tc.avoid && got[busy] == 0 {
					t.Errorf("calls per replica %v: least-in-use routing avoided the busy replica; the comparison shows nothing", got)
				}
				for range 3 {
					<-done
				}
				// The busy replica's queue is worked off and reported so.
				time.Sleep(10 * time.Second)
				if q := p.Stats(context.Background()).Pools[busy].SpaceQueue; q != 0 {
					t.Errorf("spaceQueue %d after the queue ran out, want 0", q)
				}
			})
		})
	}
}

// TestRebalanceFactor: a registered user pinned to the replica whose Space
// has a long queue stays there without RebalanceFactor (stickiness first)
// and moves to a quick replica with it.
func TestRebalanceFactor(t *testing.T) {
	for _, tc := range []struct {
		name   string
		factor float64
		moves  bool
	}{
		{"sticky without factor", 0, false},
		{"moves with factor 3", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := pool.Config{MinConnections: 1, MaxConnections: 4, QueueTimeout: time.Minute, RebalanceFactor: tc.factor}
			bubbleWith(t, 3, cfg, nil, func(t *testing.T, p *pool.Pool, srvs []*gradiotest.Server, hc *http.Client) {
				ctx := context.Background()
				busy := p.Replicas()[1]
				// New users go round robin: the second lands on replica 1.
				for i, want := range []string{p.Replicas()[0], busy} {
					r, err := p.Predict(ctx, user(i), "upper", "x")
					if err != nil || r.Replica != want {
						t.Fatalf("user %d: %v on %v, want %s", i, err, r, want)
					}
				}
				wait := preload(t, srvs[1], hc, 10)
				defer wait()
				// Anonymous calls reveal the queue: one per replica (ties go
				// round robin).
				for range 3 {
					go func() {
						if _, err := p.Predict(ctx, "", "slow", 1); err != nil {
							t.Errorf("anonymous call: %v", err)
						}
					}()
					synctest.Wait()
				}
				if q := p.Stats(context.Background()).Pools[busy].SpaceQueue; q < 9 {
					t.Fatalf("spaceQueue of %s = %d, want the preloaded queue seen", busy, q)
				}
				r, err := p.Predict(ctx, user(1), "slow", 1)
				if err != nil {
					t.Fatal(err)
				}
				if moved := r.Replica != busy; moved != tc.moves {
					t.Errorf("user on %s after the queue built up, moved %v, want %v", r.Replica, moved, tc.moves)
				}
				if tc.moves {
					// Re-pinned: the next call stays on the new replica.
					r2, err := p.Predict(ctx, user(1), "upper", "y")
					if err != nil || r2.Replica != r.Replica {
						t.Errorf("next call: %v on %v, want %s", err, r2, r.Replica)
					}
				}
			})
		})
	}
}

// TestConcurrencyAdvice: at Gradio's default concurrency of 1, our
// parallel calls wait in the Space's queue; the pool says once, in one
// warning naming the app's two settings (concurrency_limit and
// max_threads), that MaxConnections is above the effective concurrency,
// and pool-stats shows that figure. A Space without a limit gets no such
// advice, and its concurrency is seen (issue 21 item 8).
func TestConcurrencyAdvice(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limit  int
		advice int
		conc   int
	}{
		{"concurrency 1", 1, 1, 1},
		{"unlimited", -1, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			logs := &logbuf.Buffer{}
			cfg := pool.Config{MinConnections: 1, MaxConnections: 4, OnEvent: rec.hook,
				Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			bubbleWith(t, 1, cfg, func(_ int, s *gradiotest.Server) { s.DefaultConcurrencyLimit = tc.limit },
				func(t *testing.T, p *pool.Pool, _ []*gradiotest.Server, _ *http.Client) {
					if _, err := p.Predict(context.Background(), "", "slow", 1); err != nil { // learn the run time
						t.Fatal(err)
					}
					for range 2 {
						spread(t, p, 1, 3)
					}
					synctest.Wait()
					if n := rec.count(pool.EventConcurrencyLimited, ""); n != tc.advice {
						t.Errorf("%d concurrency_limited events, want %d", n, tc.advice)
					}
					warnings := 0
					for _, l := range strings.Split(logs.String(), "\n") {
						if !strings.Contains(l, "concurrency_limited") {
							continue
						}
						warnings++
						for _, want := range []string{"level=WARN", "concurrency_limit", "max_threads", "effective_concurrency=1", "max_connections=4"} {
							if !strings.Contains(l, want) {
								t.Errorf("the advice does not say %q: %s", want, l)
							}
						}
					}
					if warnings != tc.advice {
						t.Errorf("%d concurrency_limited log lines, want %d:\n%s", warnings, tc.advice, logs)
					}
					ep := p.Stats(context.Background()).Pools[p.Replicas()[0]].Endpoints["slow"]
					if ep.Concurrency != tc.conc || ep.Running != 0 || ep.Queued != 0 || ep.ProcessTime < 0.9 {
						t.Errorf("endpoint stats %+v, want concurrency %d, nothing running, ~1 s process time", ep, tc.conc)
					}
				})
		})
	}
}
