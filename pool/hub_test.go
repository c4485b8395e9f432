package pool_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// spaces registers srvs as Spaces sim/app_0, sim/app_1, ... on a Hub.
func spaces(t *testing.T, srvs []*gradiotest.Server) (*gradiotest.Hub, []string) {
	t.Helper()
	hub := gradiotest.NewHub()
	t.Cleanup(hub.Close)
	ids := make([]string, len(srvs))
	for i, s := range srvs {
		ids[i] = "sim/app_" + string(rune('0'+i))
		hub.AddSpace(ids[i], s)
	}
	return hub, ids
}

func TestSpaceNames(t *testing.T) {
	srvs := replicas(t, 2)
	hub, ids := spaces(t, srvs)
	p := newPool(t, pool.Config{Replicas: ids, ClientOptions: []gradio.Option{gradio.WithHubURL(hub.URL)}})
	if got := p.Replicas(); got[0] != "app_0" || got[1] != "app_1" {
		t.Errorf("names = %q", got)
	}
	res, err := p.Predict(ctxT(t), "a@example.com", "upper", "x")
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stats(t.Context()).Pools[res.Replica]
	if st.Source != "sim/"+res.Replica || st.URL == "" {
		t.Errorf("stats of %s = %+v", res.Replica, st)
	}
}

func TestSleepingSpace(t *testing.T) {
	t.Run("fail fast then wake", func(t *testing.T) {
		srvs := replicas(t, 2)
		hub, ids := spaces(t, srvs)
		hub.SetStage(ids[0], gradiotest.StageSleeping)
		p := newPool(t, pool.Config{Replicas: ids, ClientOptions: []gradio.Option{gradio.WithHubURL(hub.URL)}})
		ctx := ctxT(t)
		res, err := p.Predict(ctx, user(0), "upper", "x") // round robin: app_0 first
		if err != nil {
			t.Fatal(err)
		}
		if res.Replica != "app_1" {
			t.Errorf("served by %s while app_0 sleeps", res.Replica)
		}
		if st := p.Stats(t.Context()).Pools["app_0"]; st.State != pool.StateEjected {
			t.Errorf("app_0 state = %s, want ejected", st.State)
		}
		// The look-up woke the Space (after the Hub's wake delay); after the
		// back-off a new user probes it and it serves again.
		deadline := time.Now().Add(10 * time.Second)
		for i := 1; ; i++ {
			res, err := p.Predict(ctx, user(i), "upper", "x")
			if err != nil {
				t.Fatal(err)
			}
			if res.Replica == "app_0" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("app_0 never served again; stage %s; stats %+v", hub.Stage(ids[0]), p.Stats(t.Context()).Pools["app_0"])
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("wait for wake", func(t *testing.T) {
		srvs := replicas(t, 2)
		hub, ids := spaces(t, srvs)
		hub.SetStage(ids[0], gradiotest.StageSleeping)
		p := newPool(t, pool.Config{Replicas: ids, ClientOptions: []gradio.Option{
			gradio.WithHubURL(hub.URL), gradio.WithWakeTimeout(10 * time.Second), gradio.WithWakePollInterval(20 * time.Millisecond)}})
		res, err := p.Predict(ctxT(t), user(0), "upper", "x")
		if err != nil {
			t.Fatal(err)
		}
		if res.Replica != "app_0" {
			t.Errorf("served by %s, want the woken app_0", res.Replica)
		}
	})
}

func TestPausedSpace(t *testing.T) {
	srvs := replicas(t, 2)
	hub, ids := spaces(t, srvs)
	hub.SetStage(ids[1], gradiotest.StagePaused)
	p := newPool(t, pool.Config{Replicas: ids, ClientOptions: []gradio.Option{gradio.WithHubURL(hub.URL)}})
	ctx := ctxT(t)
	for i := range 6 {
		res, err := p.Predict(ctx, user(i), "upper", "x")
		if err != nil {
			t.Fatal(err)
		}
		if res.Replica != "app_0" {
			t.Errorf("user %d served by %s while app_1 is paused", i, res.Replica)
		}
	}
	st := p.Stats(t.Context()).Pools["app_1"]
	if st.State != pool.StateEjected || st.ConsecutiveFailures == 0 {
		t.Errorf("paused replica stats = %+v", st)
	}
	// With every Space paused the error names each cause.
	hub.SetStage(ids[0], gradiotest.StagePaused)
	p2 := newPool(t, pool.Config{Replicas: ids, ClientOptions: []gradio.Option{gradio.WithHubURL(hub.URL)}})
	_, err := p2.Predict(ctx, "", "upper", "x")
	var all *pool.AllReplicasFailedError
	var se *gradio.SpaceError
	if !errors.As(err, &all) || len(all.Causes) != 2 || !errors.As(err, &se) || se.Stage != gradiotest.StagePaused {
		t.Errorf("all paused: %v", err)
	}
}
