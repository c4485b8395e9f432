package pool_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// TestParkedReplica: a parked replica takes no calls and no users, its
// paused Space is neither probed nor ejected, and after the Space runs
// again and the park ends it serves again.
func TestParkedReplica(t *testing.T) {
	srvs := replicas(t, 2)
	hub, ids := spaces(t, srvs)
	hub.SetStartTimes(time.Millisecond, time.Millisecond)
	var mu sync.Mutex
	var ejected []string
	p := newPool(t, pool.Config{Replicas: ids, ClientOptions: []gradio.Option{gradio.WithHubURL(hub.URL)},
		OnEvent: func(e pool.Event) {
			if e.Kind == pool.EventEjected {
				mu.Lock()
				ejected = append(ejected, e.Replica)
				mu.Unlock()
			}
		}})
	ctx := ctxT(t)
	post := func(what string) {
		req, _ := http.NewRequest("POST", hub.URL+"/api/spaces/"+ids[0]+"/"+what, nil)
		req.Header.Set("Authorization", "Bearer hf_any")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", what, resp.StatusCode)
		}
	}
	// app_0's Space is paused and the replica parked before the pool's
	// first call: the start-up connect and the prober must leave it alone
	post("pause")
	if err := p.SetParked("app_0", true); err != nil {
		t.Fatal(err)
	}
	if err := p.SetParked("nope", true); err == nil {
		t.Error("parked an unknown replica")
	}
	p.CheckReplicas()
	for i := range 6 {
		res, err := p.Predict(ctx, user(i), "upper", "x")
		if err != nil {
			t.Fatal(err)
		}
		if res.Replica != "app_1" {
			t.Fatalf("user %d served by parked %s", i, res.Replica)
		}
	}
	before := hub.Lookups(ids[0]) + srvs[0].Requests("config")
	for range 5 {
		pool.ProbeRoundWait(p)
	}
	if after := hub.Lookups(ids[0]) + srvs[0].Requests("config"); after != before {
		t.Errorf("the parked replica was probed %d times", after-before)
	}
	if st := p.Stats(ctx).Pools["app_0"]; st.State != pool.StateParked {
		t.Fatalf("app_0 state %s", st.State)
	}
	mu.Lock()
	if len(ejected) != 0 {
		t.Errorf("ejected while parked: %v", ejected)
	}
	mu.Unlock()
	post("restart")
	for i := 0; i < 200 && hub.Stage(ids[0]) != "RUNNING"; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.SetParked("app_0", false); err != nil {
		t.Fatal(err)
	}
	served := false
	for i := range 8 {
		res, err := p.Predict(ctx, user(100+i), "upper", "x")
		if err != nil {
			t.Fatal(err)
		}
		served = served || res.Replica == "app_0"
	}
	if !served {
		t.Error("app_0 serves no new user after the park ended")
	}
}

// TestCallsWaitForAWake: with every replica parked, a call waits (up to
// SetWakeWait) and runs once a replica is un-parked; without a wait, or
// past it, it fails with ErrParked among its causes.
func TestCallsWaitForAWake(t *testing.T) {
	srvs := replicas(t, 2)
	p := newPool(t, pool.Config{Replicas: []string{srvs[0].URL, srvs[1].URL}})
	ctx := ctxT(t)
	names := p.Replicas()
	for _, n := range names {
		if err := p.SetParked(n, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Predict(ctx, user(0), "upper", "x"); !errors.Is(err, pool.ErrParked) {
		t.Fatalf("no wait set: %v, want ErrParked", err)
	}
	p.SetWakeWait(time.Minute)
	type out struct {
		res *pool.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := p.Predict(ctx, user(1), "upper", "x")
		done <- out{res, err}
	}()
	for i := 0; i < 1000 && p.ParkedWaiters() == 0; i++ {
		time.Sleep(2 * time.Millisecond)
	}
	if p.ParkedWaiters() != 1 {
		t.Fatalf("%d waiting", p.ParkedWaiters())
	}
	select {
	case o := <-done:
		t.Fatalf("returned while every replica is parked: %+v", o)
	default:
	}
	if err := p.SetParked(names[1], false); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil || o.res.Replica != names[1] {
		t.Fatalf("after the wake: %+v %v", o.res, o.err)
	}
	if p.ParkedWaiters() != 0 {
		t.Errorf("%d still waiting", p.ParkedWaiters())
	}
	// past the wait: the call fails, with the cause
	if err := p.SetParked(names[1], true); err != nil {
		t.Fatal(err)
	}
	p.SetWakeWait(20 * time.Millisecond)
	if _, err := p.Predict(ctx, user(2), "upper", "x"); !errors.Is(err, pool.ErrParked) {
		t.Fatalf("past the wait: %v", err)
	}
}

// TestWakeWaitShowsPosition: calls waiting for a wake show it in their
// QueueWatch (what /v1/submit's waiting events and the front door's
// estimation messages are made of): Waking, their place among the calls
// waiting so, and, once the autoscaler has set one, the time until the
// wake it expects; after the wake they wait no more.
func TestWakeWaitShowsPosition(t *testing.T) {
	srvs := replicas(t, 1)
	p := newPool(t, pool.Config{Replicas: []string{srvs[0].URL}})
	ctx := ctxT(t)
	name := p.Replicas()[0]
	if err := p.SetParked(name, true); err != nil {
		t.Fatal(err)
	}
	p.SetWakeWait(time.Minute)
	qws := []*pool.QueueWatch{new(pool.QueueWatch), new(pool.QueueWatch)}
	errs := make(chan error, 2)
	for i, qw := range qws {
		go func() {
			c, err := p.SubmitWith(ctx, user(i), pool.CallOptions{Watch: qw}, "upper", "x")
			if err == nil {
				_, err = c.Wait(ctx)
			}
			errs <- err
		}()
		select {
		case <-qw.Waited():
		case <-time.After(5 * time.Second):
			t.Fatalf("call %d never shown waiting", i)
		}
	}
	for i, qw := range qws {
		pos, ok := qw.Position()
		if !ok || !pos.Waking || pos.Rank != i || pos.Size != 2 || pos.ETAKnown || pos.Replica != "" {
			t.Fatalf("call %d before any ETA: %+v %v", i, pos, ok)
		}
	}
	p.SetWakeETA(time.Now().Add(90 * time.Second))
	pos, _ := qws[1].Position()
	if !pos.ETAKnown || pos.ETA < 80*time.Second || pos.ETA > 90*time.Second {
		t.Fatalf("with the wake ETA: %+v", pos)
	}
	p.SetWakeETA(time.Now().Add(-time.Second)) // overdue: expected any moment
	if pos, _ = qws[0].Position(); !pos.ETAKnown || pos.ETA != 0 {
		t.Fatalf("overdue wake: %+v", pos)
	}
	if err := p.SetParked(name, false); err != nil {
		t.Fatal(err)
	}
	for range qws {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, qw := range qws {
		if pos, ok := qw.Position(); ok {
			t.Errorf("call %d still shown waiting after the wake: %+v", i, pos)
		}
	}
}

// TestWakeVisitsAStoppedSpace: Pool.Wake (autoscale's sleep lever) wakes
// a replica whose Space stopped by its sleep time with a visit: the Space
// goes APP_STARTING then RUNNING, without a build; the replica stays
// parked (the autoscaler ends that).
func TestWakeVisitsAStoppedSpace(t *testing.T) {
	srvs := replicas(t, 1)
	hub, ids := spaces(t, srvs)
	hub.SetStartTimes(time.Millisecond, 10*time.Millisecond)
	p := newPool(t, pool.Config{Replicas: ids, ClientOptions: []gradio.Option{gradio.WithHubURL(hub.URL)}})
	name := p.Replicas()[0]
	if err := p.SetParked(name, true); err != nil {
		t.Fatal(err)
	}
	hub.SetSleepTime(ids[0], 1)
	for i := 0; i < 300 && hub.Stage(ids[0]) != "STOPPED"; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if st := hub.Stage(ids[0]); st != "STOPPED" {
		t.Fatalf("stage %s, want STOPPED after its sleep time", st)
	}
	if err := p.Wake("nope"); err == nil {
		t.Error("woke an unknown replica")
	}
	if err := p.Wake(name); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300 && hub.Stage(ids[0]) != "RUNNING"; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	var got []string
	for _, x := range hub.Transitions(ids[0]) {
		got = append(got, x.Stage)
	}
	if len(got) < 3 || got[len(got)-3] != "STOPPED" || got[len(got)-2] != "APP_STARTING" || got[len(got)-1] != "RUNNING" {
		t.Fatalf("transitions %v, want STOPPED APP_STARTING RUNNING", got)
	}
	if st := p.Stats(ctxT(t)).Pools[name].State; st != pool.StateParked {
		t.Errorf("state %s after the wake, want parked until the autoscaler ends it", st)
	}
}

// TestCallsWaitForAWakeBesideAFailedReplica: a call that no awake replica
// can take (one parked, the other disabled or down) waits for the wake
// like one that finds every replica parked, instead of failing at once
// while the autoscaler wakes the parked one; a replica refusing the call
// room (its waiter list full) is a bound, and the call is refused.
func TestCallsWaitForAWakeBesideAFailedReplica(t *testing.T) {
	for _, how := range []string{"disabled", "down"} {
		t.Run(how, func(t *testing.T) {
			srvs := replicas(t, 2)
			p := newPool(t, pool.Config{Replicas: urls(srvs)})
			ctx := ctxT(t)
			names := p.Replicas()
			if err := p.SetParked(names[0], true); err != nil {
				t.Fatal(err)
			}
			switch how {
			case "disabled":
				if _, err := p.SetControl(names[1], pool.ControlDisable); err != nil {
					t.Fatal(err)
				}
			case "down":
				srvs[1].Close()
			}
			p.SetWakeWait(time.Minute)
			done := make(chan error, 1)
			var served string
			go func() {
				res, err := p.Predict(ctx, user(1), "upper", "x")
				if err == nil {
					served = res.Replica
				}
				done <- err
			}()
			for i := 0; i < 2000 && p.ParkedWaiters() == 0; i++ {
				select {
				case err := <-done:
					t.Fatalf("the call ended (%v) instead of waiting for the wake", err)
				default:
				}
				time.Sleep(2 * time.Millisecond)
			}
			if p.ParkedWaiters() != 1 {
				t.Fatalf("%d waiting for the wake", p.ParkedWaiters())
			}
			if err := p.SetParked(names[0], false); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil || served != names[0] {
				t.Fatalf("after the wake: served by %q, %v", served, err)
			}
		})
	}
	t.Run("full", func(t *testing.T) {
		srvs := replicas(t, 2)
		p := newPool(t, pool.Config{Replicas: urls(srvs), MaxConnections: 1, MaxWaiters: 1})
		ctx := ctxT(t)
		names := p.Replicas()
		if err := p.SetParked(names[0], true); err != nil {
			t.Fatal(err)
		}
		p.SetWakeWait(time.Minute)
		l, err := p.Acquire(ctx, user(0)) // names[1]'s only session
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release()
		queued := make(chan *pool.Lease, 1)
		go func() {
			l2, _ := p.Acquire(ctx, user(0)) // fills its waiter list
			queued <- l2
		}()
		for i := 0; p.Stats(t.Context()).Pools[names[1]].QueueLength != 1; i++ {
			if i > 10000 {
				t.Fatal("the second caller never queued")
			}
			time.Sleep(time.Millisecond)
		}
		_, err = p.Acquire(ctx, user(0))
		if !errors.Is(err, pool.ErrQueueFull) || !pool.IsOverloaded(err) || pool.IsParked(err) {
			t.Errorf("beyond the waiter list beside a parked replica: %v, want ErrQueueFull at once, overloaded (503 queue_full)", err)
		}
		l.Release()
		if l2 := <-queued; l2 != nil {
			l2.Release()
		}
	})
}
