package gateway_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
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
	rec := &starvedRecorder{}
	srv, _, _ := frontGatewayOver(t, []string{sim.URL}, func(c *gateway.Config) {
		c.Pool.HangTimeout = 300 * time.Millisecond
		c.Pool.ProbeInterval = 100 * time.Millisecond
		c.Pool.OnEvent = rec.onEvent
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
	if rec.events == 0 {
		t.Fatal("the pool's events never reached the test's hook (Config.PoolConfig must keep pool.Config.OnEvent)")
	}
	if len(rec.suspect) > 0 {
		t.Errorf("the replica busy with front-door calls was taken for dead: %v", rec.suspect)
	}
	if n := sim.Executions("upper"); n != calls {
		t.Errorf("%d calls ran, want %d", n, calls)
	}
}

// TestFrontDoorStarvedReplicaAnswersLate: a replica short of threads
// answers joins, and opens the streams of new sessions, later than the
// client's header time-out (Gradio's login check waits for a thread; on
// real 5.49.1 short of threads the headers came up to a minute late),
// while the calls it runs stream. Those joins are accepted and their calls
// run: the front door waits for the answers while the replica shows life,
// instead of telling callers "not run again" about calls that then run.
func TestFrontDoorStarvedReplicaAnswersLate(t *testing.T) {
	sim := gradiotest.NewUnstartedServer(nil)
	sim.DefaultConcurrencyLimit = -1
	sim.MaxThreads = 4
	sim.Latency = 1500 * time.Millisecond
	sim.HeartbeatInterval = 50 * time.Millisecond
	sim.Start()
	t.Cleanup(sim.Close)
	srv, _, _ := frontGatewayOver(t, []string{sim.URL}, func(c *gateway.Config) {
		// Far below the replica's wait for a thread (Latency).
		c.Pool.ClientOptions = append(c.Pool.ClientOptions, gradio.WithHeaderTimeout(400*time.Millisecond))
		c.FrontDoor.ShowReplicaErrors = true
	})
	upper := strconv.Itoa(fnIndexOf(t, srv.URL, "upper"))
	const calls = 8 // twice the replica's threads
	streams := make([]<-chan map[string]any, calls)
	for i := range calls {
		hash := "late" + strconv.Itoa(i)
		joinAt(t, srv.URL, hash, `"data":["x"],"fn_index":`+upper)
		streams[i] = fdMessages(t, srv.URL, hash)
	}
	for i, ch := range streams {
		if done := waitMsg(t, ch, "process_completed"); done["success"] != true {
			t.Errorf("call %d: %v", i, done)
		}
	}
	if n := sim.Executions("upper"); n != calls {
		t.Errorf("%d calls ran, want %d", n, calls)
	}
}
