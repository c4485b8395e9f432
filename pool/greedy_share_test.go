package pool_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

const (
	greedyOutput = 63 << 16 // 3.9 MiB: the 63 MiB scaled down 16 times, as shareEvent
	greedyCalls  = 12
)

// TestGreedyCallerCannotTakeTheEventBudget (issue 33 item 2): one user
// pulling 3.9 MiB outputs in 12 parallel calls, again and again, on a
// HEALTHY replica does not make other users' outputs (0.56 MiB, 9 MB / 16)
// on the same replica fail: each other call is a party under its fair
// share inside the replica's part of the 16 MiB budget and takes the room
// back from the greedy user, whose streams cut for it end with
// gradio.ErrEventShare, the caller's fault: the healthy replica counts no
// error for them, and the budget charges nothing to the replica.
func TestGreedyCallerCannotTakeTheEventBudget(t *testing.T) {
	app := bigOutputApp(shareOutput)
	app.Handle("huge", func(context.Context, *gradiotest.Call) ([]any, error) {
		return []any{strings.Repeat("h", greedyOutput)}, nil
	}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	good := gradiotest.NewUnstartedServer(app)
	good.DefaultConcurrencyLimit = -1
	good.Start()
	t.Cleanup(good.Close)
	budget := gradio.NewEventBudget(shareTotal)
	// Generous time-outs: 3.9 MiB outputs under the race detector on a
	// loaded machine take long; the gap rule is not what this measures.
	opts := []gradio.Option{gradio.WithEventBudget(budget), gradio.WithHeaderTimeout(30 * time.Second), gradio.WithStreamGapTimeout(5 * time.Minute)}
	gp := newPool(t, pool.Config{Replicas: []string{good.URL}, MinConnections: -1, MaxConnections: greedyCalls + shareHealthy, ClientOptions: opts})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const rounds = 3
	baseline := 0
	for range rounds {
		baseline += healthyRound(t, ctx, gp)
	}

	gctx, stopGreedy := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var greedyOK, greedyShare, greedyOther atomic.Int64
	for range greedyCalls {
		wg.Go(func() {
			for gctx.Err() == nil {
				_, err := gp.Predict(gctx, "greedy@example.com", "huge", "x")
				switch {
				case err == nil:
					greedyOK.Add(1)
				case errors.Is(err, gradio.ErrEventShare):
					greedyShare.Add(1)
				case gctx.Err() == nil:
					greedyOther.Add(1)
					t.Logf("greedy call: %v", err)
				}
			}
		})
	}
	for i := 0; budget.Held() < shareTotal/2; i++ {
		if i > 6000 {
			t.Fatalf("the greedy calls hold only %d bytes", budget.Held())
		}
		time.Sleep(5 * time.Millisecond)
	}
	withGreedy := 0
	for range rounds {
		withGreedy += healthyRound(t, ctx, gp)
	}
	stopGreedy()
	wg.Wait()
	// The cancelled calls' sessions come back once the replica answers
	// their cancels (slow here: megabytes under the race detector).
	for i := 0; gp.Stats(ctx).InUseConnections != 0 || budget.Held() != 0; i++ {
		if i > 12000 {
			t.Fatalf("after the calls: %d sessions in use, %d bytes held", gp.Stats(ctx).InUseConnections, budget.Held())
		}
		time.Sleep(10 * time.Millisecond)
	}

	if n := rounds * shareHealthy; baseline != n || withGreedy != n {
		t.Errorf("other users' calls ok: %d/%d without the greedy user, %d/%d beside it", baseline, n, withGreedy, n)
	}
	if e := gp.Stats(ctx).Errors; e != 0 {
		t.Errorf("the healthy replica was charged %d errors", e)
	}
	if greedyOther.Load() != 0 {
		t.Errorf("%d greedy calls failed for another cause than their share", greedyOther.Load())
	}
	rep, party := budget.Charged()
	if rep != 0 {
		t.Errorf("the budget charged %d cuts to the replica (%d to callers)", rep, party)
	}
	t.Logf("other users %d/%d ok alone, %d/%d beside the greedy user (%d calls of %.1f MiB at once: %d ok, %d cut for their share); charged: %d to the replica, %d to callers",
		baseline, rounds*shareHealthy, withGreedy, rounds*shareHealthy, greedyCalls, float64(greedyOutput)/(1<<20), greedyOK.Load(), greedyShare.Load(), rep, party)
}
