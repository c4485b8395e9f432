package pool_test

import (
	"context"
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
// quickest) until that caller's deadline. (A new signed-in user is still
// assigned round robin and may wait for that connect: a known limit.)
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
