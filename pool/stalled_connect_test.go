package pool_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestCallsAvoidAStalledConnect (issue 20 "Why" 8): a replica added while
// the others serve, whose /config body trickles (its connect ends only at
// the header time-out, 30 s here), gets no anonymous caller while it
// connects: every anonymous call goes to the connected replica and is
// served within a deadline far shorter than the stalled connect. It took
// the first caller routed to it (nothing queued there, so it looked
// quickest) until that caller's deadline. New signed-in users:
// TestNewUsersAvoidAStalledConnect.
func TestCallsAvoidAStalledConnect(t *testing.T) {
	for _, routing := range []pool.Routing{pool.RouteExpectedTime, pool.RouteLeastInUse} {
		t.Run(string(routing), func(t *testing.T) {
			good := replicas(t, 1)[0]
			stalled := gradiotest.NewUnstartedServer(nil)
			stalled.SlowBody = time.Second // 64 bytes a second: /config takes minutes
			stalled.Start()
			t.Cleanup(stalled.Close)
			cfg := pool.Config{Replicas: []string{good.URL}, Routing: routing,
				ClientOptions: []gradio.Option{gradio.WithHeaderTimeout(30 * time.Second)}}
			p := newPool(t, cfg)
			if _, err := p.Predict(ctxT(t), "", "upper", "warm"); err != nil {
				t.Fatal(err)
			}
			cfg.Replicas = append(cfg.Replicas, stalled.URL)
			if err := p.Reconfigure(cfg); err != nil {
				t.Fatal(err)
			}
			for range 400 { // bounded wait: the added replica's connect has begun
				if stalled.Requests("config") > 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if stalled.Requests("config") == 0 {
				t.Fatal("the added replica was never asked for its /config")
			}
			for i := range 8 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := p.Predict(ctx, "", "upper", "x")
				cancel()
				if err != nil {
					t.Fatalf("call %d while the added replica's connect stalls: %v", i, err)
				}
				if res.Replica != good.Listener.Addr().String() {
					t.Fatalf("call %d ran on %s", i, res.Replica)
				}
			}
		})
	}
}

// addStalled adds to p (configured as cfg) a replica whose /config body
// trickles, and returns once its connect has begun.
func addStalled(t *testing.T, p *pool.Pool, cfg pool.Config) *gradiotest.Server {
	t.Helper()
	stalled := gradiotest.NewUnstartedServer(nil)
	stalled.SlowBody = time.Second // 64 bytes a second: /config takes minutes
	stalled.Start()
	t.Cleanup(stalled.Close)
	cfg.Replicas = append(cfg.Replicas, stalled.URL)
	if err := p.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	// Reconfigure starts its connect (its minimum sessions); poll,
	// bounded, for its /config request.
	for range 400 {
		if stalled.Requests("config") > 0 {
			return stalled
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the added replica was never asked for its /config")
	return nil
}

// TestNewUsersAvoidAStalledConnect (issue 20 "Why" 8, abuse row 8's
// note): while an added replica's /config trickles, new signed-in users
// are assigned to the connected replicas, not round robin to the stalled
// one where each would wait for that connect (30 s here, past the 5 s
// deadline of each call) and then stay assigned. Users moved off a
// replica that refuses their calls also land on a connected one.
// (TestRoundRobinSpread checks that the start-up connects, younger than
// the 2 s default, keep the round robin even.)
func TestNewUsersAvoidAStalledConnect(t *testing.T) {
	srvs := replicas(t, 2)
	cfg := pool.Config{Replicas: []string{srvs[0].URL, srvs[1].URL}, MinConnections: 1,
		ClientOptions: []gradio.Option{gradio.WithHeaderTimeout(30 * time.Second)}}
	p := newPool(t, cfg)
	// Any connect under way counts as stalled here: the test need not
	// wait out the 2 s after which a real one does.
	pool.SetStalledConnect(p, 0)
	if _, err := p.Predict(ctxT(t), "", "upper", "warm"); err != nil {
		t.Fatal(err)
	}
	stalled := addStalled(t, p, cfg)
	gone := srvs[1].Listener.Addr().String()
	var moving []string // the users assigned to srvs[1]
	stalledName := stalled.Listener.Addr().String()
	for i := range 9 { // three rounds of round robin over three replicas
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := p.Predict(ctx, fmt.Sprintf("new-%d@example.com", i), "upper", "x")
		cancel()
		if err != nil {
			t.Fatalf("new user %d while the added replica's connect stalls: %v", i, err)
		}
		if res.Replica == stalledName {
			t.Fatalf("new user %d was assigned to the stalled replica", i)
		}
		if res.Replica == gone {
			moving = append(moving, fmt.Sprintf("new-%d@example.com", i))
		}
	}
	if len(moving) == 0 {
		t.Fatal("no new user was assigned to the second replica")
	}
	// The second replica refuses every join from now on (queue full): its
	// users move, each to the first one (the stalled replica is not
	// ready), whatever the rotation of moves. (Closing it instead would
	// cut a join on a kept-alive connection: maybe accepted, not moved.)
	srvs[1].SetQueueFull(true)
	for _, u := range moving {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := p.Predict(ctx, u, "upper", "x")
		cancel()
		if err != nil {
			t.Fatalf("moved user %s: %v", u, err)
		}
		if res.Replica != srvs[0].Listener.Addr().String() {
			t.Fatalf("moved user %s ran on %s", u, res.Replica)
		}
	}
}
