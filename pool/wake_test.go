package pool_test

import (
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestWakeSleeping: a call that finds its replica's Space asleep fails
// over at once either way; with WakeSleeping the pool then connects the
// Space in the background as soon as it runs, without waiting for another
// call to probe it.
func TestWakeSleeping(t *testing.T) {
	for _, wake := range []bool{false, true} {
		srvs := replicas(t, 2)
		hub, ids := spaces(t, srvs)
		hub.SetWakeDelay(50 * time.Millisecond)
		hub.SetStage(ids[0], gradiotest.StageSleeping)
		rec := &recorder{}
		p := newPool(t, pool.Config{Replicas: ids, WakeSleeping: wake, OnEvent: rec.hook, ClientOptions: []gradio.Option{
			gradio.WithHubURL(hub.URL), gradio.WithWakePollInterval(10 * time.Millisecond)}})
		res, err := p.Predict(ctxT(t), user(0), "upper", "x") // round robin: app_0 first
		if err != nil {
			t.Fatal(err)
		}
		if res.Replica != "app_1" {
			t.Fatalf("wake %v: served by %s while app_0 sleeps", wake, res.Replica)
		}
		// Bounded wait for the background wake (no call is made meanwhile).
		state := ""
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if state = p.Stats(t.Context()).Pools["app_0"].State; state == pool.StateReady {
				break
			}
		}
		if got := state == pool.StateReady; got != wake {
			t.Errorf("wake_sleeping %v: app_0 %s without a call, want ready %v", wake, state, wake)
		}
		if wake && rec.count(pool.EventRecovered, "app_0") != 1 {
			t.Errorf("recovered events: %d, want 1", rec.count(pool.EventRecovered, "app_0"))
		}
	}
}
