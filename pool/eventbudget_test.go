package pool_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestEventBudgetBoundsManyStreams: a replica answers every data stream
// with one line that never ends, each under the 64 MiB line limit; 16
// calls at once would make the pool hold 16 × 40 MiB. With the replicas'
// clients sharing a 16 MiB EventBudget the calls end with
// gradio.ErrEventTooLarge, the heap stays within a generous bound, and
// once the calls are over the budget is whole again.
func TestEventBudgetBoundsManyStreams(t *testing.T) {
	const (
		calls   = 16
		offered = 40 << 20 // per stream: under the per-line limit
		total   = 16 << 20
		bound   = 128 << 20 // the budget, the allowances, garbage of refused growth, the race detector
	)
	srv := gradiotest.NewUnstartedServer(nil)
	srv.Hostile, srv.HostileBytes = gradiotest.HostileEndlessLine, offered
	srv.Start()
	defer srv.Close()
	budget := gradio.NewEventBudget(total)
	p := newPool(t, pool.Config{Replicas: []string{srv.URL}, MinConnections: -1, MaxConnections: calls, ConnectRetries: -1,
		ClientOptions: []gradio.Option{gradio.WithEventBudget(budget)}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, calls)
	grew := peakHeap(func() {
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() { _, errs[i] = p.Predict(ctx, "", "upper", "x") })
		}
		wg.Wait()
	})
	tooLarge := 0
	for i, err := range errs {
		if err == nil {
			t.Fatalf("call %d on the hostile replica succeeded", i)
		}
		if ctx.Err() != nil {
			t.Fatalf("call %d ended only at the test's deadline: %v", i, err)
		}
		if errors.Is(err, gradio.ErrEventTooLarge) {
			tooLarge++
		}
	}
	if grew > bound {
		t.Errorf("heap grew by %d MiB with %d streams offering %d MiB each (budget %d MiB, bound %d MiB)", grew>>20, calls, offered>>20, total>>20, bound>>20)
	}
	if tooLarge == 0 {
		t.Fatalf("no call ended with ErrEventTooLarge: %v", errs[0])
	}
	if h := budget.Held(); h != 0 {
		t.Errorf("after the calls the budget still counts %d bytes", h)
	}
	t.Logf("%d/%d calls: event too large; heap peak +%d MiB; e.g. %v", tooLarge, calls, grew>>20, errs[0])
}
