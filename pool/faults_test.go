package pool_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestNoDoubleExecutionUnderFaults runs many concurrent calls while faults
// hit the replicas at random (5xx on join, queue full, streams cut mid-event,
// app restarts, config failures). Whatever happens to a call, its handler
// ran at most once; a call that succeeded ran exactly once.
func TestNoDoubleExecutionUnderFaults(t *testing.T) {
	echo, app := newEchoApp()
	srvs := unlimitedReplicas(t, app, 3)
	p := newPool(t, pool.Config{Replicas: urls(srvs), MaxConnections: 4, HealthCheckInterval: 30 * time.Millisecond,
		ClientOptions: []gradio.Option{gradio.WithHeaderTimeout(time.Second)}})
	ctx := ctxT(t)

	stop := make(chan struct{})
	var faults sync.WaitGroup
	var joinsFailed, streamsCut int // injected; what is left unconsumed is subtracted below
	faults.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			s := srvs[rng.IntN(len(srvs))]
			switch rng.IntN(6) {
			case 0:
				s.UpdateKnobs(func(k *gradiotest.Knobs) { k.FailJoin++ })
				joinsFailed++
			case 1:
				s.UpdateKnobs(func(k *gradiotest.Knobs) { k.CutStream++ })
				streamsCut++
			case 2:
				s.SetQueueFull(true)
				time.Sleep(2 * time.Millisecond)
				s.SetQueueFull(false)
			case 3:
				s.FailNextConfigs(1)
			case 4:
				if rng.IntN(4) == 0 {
					s.Restart()
				}
			}
		}
	})

	const n = 150
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := map[string]bool{}
	var failed, allFailed int
	for i := range n {
		wg.Go(func() {
			in := fmt.Sprint("f-", i)
			u := ""
			if i%3 != 0 {
				u = user(i % 20)
			}
			_, err := p.Predict(ctx, u, "echo", in)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok[in] = true
				return
			}
			failed++
			var all *pool.AllReplicasFailedError
			if errors.As(err, &all) {
				allFailed++
			}
		})
	}
	wg.Wait()
	close(stop)
	faults.Wait()
	for i := range n {
		in := fmt.Sprint("f-", i)
		runs := echo.runsOf(in)
		switch {
		case runs > 1:
			t.Errorf("call %s ran %d times", in, runs)
		case ok[in] && runs != 1:
			t.Errorf("call %s succeeded but ran %d times", in, runs)
		}
	}
	st := p.Stats(t.Context())
	t.Logf("%d ok, %d failed (%d all replicas failed); failovers %d; stats calls %d errors %d",
		len(ok), failed, allFailed, st.Failovers, st.Calls, st.Errors)
	if len(ok) == 0 {
		t.Error("no call succeeded")
	}
	// The faults were real: some joins were refused and some streams cut
	// while calls ran, and the pool moved calls because of them.
	for _, s := range srvs {
		joinsFailed -= s.CurrentKnobs().FailJoin
		streamsCut -= s.CurrentKnobs().CutStream
	}
	t.Logf("faults that hit a call: %d refused joins, %d cut streams", joinsFailed, streamsCut)
	if joinsFailed == 0 || streamsCut == 0 {
		t.Errorf("faults never hit a call (%d refused joins, %d cut streams): the test proved nothing", joinsFailed, streamsCut)
	}
	if st.Failovers == 0 {
		t.Error("no failover under faults")
	}
	if st.InUseConnections != 0 {
		t.Errorf("%d sessions still in use after every call ended", st.InUseConnections)
	}
}
