package pool_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestConcurrentUsers: 200 goroutines, 3 replicas of at most 5 sessions
// each: every call succeeds exactly once, the limits hold, nothing leaks.
func TestConcurrentUsers(t *testing.T) {
	echo, app := newEchoApp()
	srvs := unlimitedReplicas(t, app, 3)
	var mu sync.Mutex
	maxInUse := map[string]int{}
	p := newPool(t, pool.Config{Replicas: urls(srvs), MaxConnections: 5, OnEvent: func(e pool.Event) {
		if e.Kind == pool.EventQueued {
			mu.Lock()
			maxInUse["queued"]++
			mu.Unlock()
		}
	}})
	ctx := ctxT(t)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			u := ""
			if i%4 != 0 {
				u = user(i % 37)
			}
			in := fmt.Sprint("call-", i)
			res, err := p.Predict(ctx, u, "echo", in)
			if err != nil {
				errs <- err
				return
			}
			if got := str(t, res.Data[0]); got != in {
				errs <- fmt.Errorf("call %d got %q", i, got)
			}
			st := p.Stats(t.Context())
			mu.Lock()
			for name, rs := range st.Pools {
				maxInUse[name] = max(maxInUse[name], rs.InUseConnections+rs.AvailableConnections)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range n {
		if r := echo.runsOf(fmt.Sprint("call-", i)); r != 1 {
			t.Errorf("call %d ran %d times", i, r)
		}
	}
	for _, name := range p.Replicas() {
		if maxInUse[name] > 5 {
			t.Errorf("%s had %d sessions, max 5", name, maxInUse[name])
		}
	}
	st := p.Stats(t.Context())
	if st.InUseConnections != 0 || st.TotalQueued != 0 || st.Calls != n {
		t.Errorf("after the run: inUse %d, queued %d, calls %d", st.InUseConnections, st.TotalQueued, st.Calls)
	}
	if maxInUse["queued"] == 0 {
		t.Log("no caller had to queue (the machine was fast)")
	}
}

func TestSubmitStreamAndCancel(t *testing.T) {
	srvs := replicas(t, 1)
	srvs[0].UpdateKnobs(func(k *gradiotest.Knobs) { k.StepDelay = 5 * time.Millisecond })
	p := newPool(t, pool.Config{Replicas: urls(srvs), MaxConnections: 1})
	ctx := ctxT(t)
	c, err := p.Submit(ctx, "s@example.com", "count", 3)
	if err != nil {
		t.Fatal(err)
	}
	var outputs int
	for ev := range c.Events() {
		if ev.Kind == gradio.EventOutput {
			outputs++
		}
	}
	data, err := c.Wait(ctx)
	if err != nil || str(t, data[0]) != "0 1 2" || outputs == 0 {
		t.Errorf("count: %v %v (%d outputs)", data, err, outputs)
	}
	<-c.Done()
	if st := p.Stats(t.Context()); st.InUseConnections != 0 {
		t.Errorf("session not released after the job: %+v", st)
	}

	// A caller whose context ends cancels its job, and the session comes
	// back (MaxConnections 1: the next call would otherwise time out).
	cctx, cancel := context.WithCancel(ctx)
	c, err = p.Submit(cctx, "s@example.com", "slow", 30)
	if err != nil {
		t.Fatal(err)
	}
	for ev := range c.Events() {
		if ev.Kind == gradio.EventStarted {
			break
		}
	}
	cancel()
	if _, err := c.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
	<-c.Done()
	res, err := p.Predict(ctx, "s@example.com", "upper", "after")
	if err != nil || str(t, res.Data[0]) != "AFTER" {
		t.Errorf("after cancel: %v %v", res, err)
	}
	if n := srvs[0].Executions("slow"); n != 1 {
		t.Errorf("slow ran %d times", n)
	}
}

func TestQueueTimeout(t *testing.T) {
	srvs := replicas(t, 1)
	rec := &recorder{}
	p := newPool(t, pool.Config{Replicas: urls(srvs), MaxConnections: 1, QueueTimeout: 50 * time.Millisecond, OnEvent: rec.hook})
	ctx := ctxT(t)
	// The queue time-out covers the app's connect too: let it connect
	// first, so that only the second Acquire waits for a session.
	p.Warm()
	waitUntil(t, func() bool { return p.Stats(ctx).Pools[p.Replicas()[0]].AvailableConnections == 1 })
	l, err := p.Acquire(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Acquire(ctx, "")
	if !errors.Is(err, pool.ErrQueueTimeout) {
		t.Errorf("second Acquire = %v, want ErrQueueTimeout", err)
	}
	l.Release()
	// (EventQueueTimeout is emitted after the waiter is woken: not checked.)
	if rec.count(pool.EventQueued, "") < 1 {
		t.Errorf("events: %d queued", rec.count(pool.EventQueued, ""))
	}
	if st := p.Stats(t.Context()).Pools[p.Replicas()[0]]; st.QueueTimeouts != 1 {
		t.Errorf("queueTimeouts = %d", st.QueueTimeouts)
	}
}

func TestClosed(t *testing.T) {
	srvs := replicas(t, 1)
	p, err := pool.New(pool.Config{Replicas: urls(srvs)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Predict(ctxT(t), "", "upper", "x"); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctxT(t)); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := p.Acquire(ctxT(t), ""); !errors.Is(err, pool.ErrClosed) {
		t.Errorf("Acquire after Close = %v", err)
	}
	if p.Ready() {
		t.Error("Ready after Close")
	}
}

// TestWaiterListFullFailover: a caller beyond a replica's MaxWaiters goes to
// another replica (and is re-pinned) instead of waiting.
func TestWaiterListFullFailover(t *testing.T) {
	srvs := replicas(t, 2)
	p := newPool(t, pool.Config{Replicas: urls(srvs), MaxConnections: 1, MaxWaiters: 1})
	ctx := ctxT(t)
	u0, _ := pinnedUsers(t, p, "upper")
	name0, name1 := p.Replicas()[0], p.Replicas()[1]
	l, err := p.Acquire(ctx, u0) // replica 0's only session
	if err != nil || pool.LeaseReplica(l) != name0 {
		t.Fatalf("Acquire: %v %v", l, err)
	}
	waiter := make(chan *pool.Lease)
	go func() {
		l2, err := p.Acquire(ctx, u0) // fills replica 0's waiter list
		if err != nil {
			t.Error(err)
		}
		waiter <- l2
	}()
	for i := 0; p.Stats(t.Context()).Pools[name0].QueueLength != 1; i++ {
		if i > 10000 {
			t.Fatal("the second caller never queued")
		}
		time.Sleep(time.Millisecond)
	}
	l3, err := p.Acquire(ctx, u0)
	if err != nil {
		t.Fatal(err)
	}
	if pool.LeaseReplica(l3) != name1 {
		t.Errorf("third caller on %s, want %s (waiter list full)", pool.LeaseReplica(l3), name1)
	}
	l3.Release()
	l.Release()
	if l2 := <-waiter; l2 != nil {
		l2.Release()
	}
	if st := p.Stats(t.Context()).Pools[name0]; st.Failovers != 1 {
		t.Errorf("failovers = %d", st.Failovers)
	}
}
