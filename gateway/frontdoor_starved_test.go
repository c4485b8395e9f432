package gateway_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestFrontDoorStarvedReplicaNotSuspect: a replica whose threads are all
// taken by front-door calls answers the pool's ping late (Gradio's
// /app_id waits for a thread), but its relayed streams bring heartbeats:
// those count as its signs of life, so it is never marked suspect while
// the calls run, and they all complete.
func TestFrontDoorStarvedReplicaNotSuspect(t *testing.T) {
	sim := gradiotest.NewUnstartedServer(nil)
	sim.DefaultConcurrencyLimit = -1
	sim.MaxThreads = 4
	sim.Latency = 2 * time.Second
	sim.HeartbeatInterval = 50 * time.Millisecond
	sim.Start()
	t.Cleanup(sim.Close)
	cfg := gateway.Config{Pool: pool.Config{Replicas: []string{sim.URL}, MinConnections: 1, MaxConnections: 8,
		HangTimeout: 300 * time.Millisecond, ProbeInterval: 100 * time.Millisecond}}
	metrics := gateway.NewMetrics(nil)
	pc := cfg.PoolConfig(nil, metrics)
	rec := &starvedRecorder{}
	pc.OnEvent = rec.wrap(pc.OnEvent)
	p, err := pool.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	b := gateway.PoolBackend(p, cfg.Pool.MaxConnections)
	metrics.Register(b)
	g := gateway.New(cfg, b, nil, metrics)
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = g.Close(context.Background())
		_ = p.Close(context.Background())
	})
	upper := strconv.Itoa(fnIndexOf(t, srv.URL, "upper"))
	const calls = 6 // more than the replica's threads
	streams := make([]<-chan map[string]any, calls)
	for i := range calls {
		hash := "starved" + strconv.Itoa(i)
		joinAt(t, srv.URL, hash, `"data":["x"],"fn_index":`+upper)
		streams[i] = fdMessages(t, srv.URL, hash)
	}
	for i, ch := range streams {
		if done := waitMsg(t, ch, "process_completed"); done["success"] != true {
			t.Errorf("call %d: %v", i, done)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.suspect) > 0 {
		t.Errorf("the replica busy with front-door calls was taken for dead: %v", rec.suspect)
	}
	if n := sim.Executions("upper"); n != calls {
		t.Errorf("%d calls ran, want %d", n, calls)
	}
}
