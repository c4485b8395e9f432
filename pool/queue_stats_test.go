package pool_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// Regression (issue 16, defect 6): queue failures left errors at 0, and a
// queue_full on a one-replica pool counted as failovers (there was nowhere
// to fail over to).
func TestQueueFailuresAreErrorsNotFailovers(t *testing.T) {
	srvs := replicas(t, 1)
	p := newPool(t, pool.Config{Replicas: urls(srvs), MaxConnections: 1, MaxWaiters: 1, QueueTimeout: 300 * time.Millisecond})
	ctx := ctxT(t)
	name := p.Replicas()[0]
	held, err := p.Acquire(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := p.Acquire(ctx, "") // waits, then times out
		waiting <- err
	}()
	waitUntil(t, func() bool { return p.Stats(ctx).Pools[name].QueueLength == 1 })
	if _, err := p.Predict(ctx, "", "upper", "x"); !errors.Is(err, pool.ErrQueueFull) {
		t.Fatalf("third caller: %v, want ErrQueueFull", err)
	}
	if err := <-waiting; !errors.Is(err, pool.ErrQueueTimeout) {
		t.Fatalf("waiter: %v, want ErrQueueTimeout", err)
	}
	held.Release()

	// The app's own queue is full: refused, and nowhere else to go.
	srvs[0].SetQueueFull(true)
	if _, err := p.Predict(ctx, "", "upper", "y"); !errors.Is(err, gradio.ErrQueueFull) {
		t.Fatalf("app queue full: %v", err)
	}
	st := p.Stats(ctx).Pools[name]
	if st.Failovers != 0 {
		t.Errorf("failovers = %d on a one-replica pool, want 0", st.Failovers)
	}
	if st.Errors != 3 {
		t.Errorf("errors = %d, want 3 (queue full, queue time-out, app queue full)", st.Errors)
	}
}
