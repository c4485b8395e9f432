package pool_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/sse"
	"github.com/gradiopool/gradiopool/pool"
)

// bigOutputApp answers "big" with an output of n bytes.
func bigOutputApp(n int) *gradiotest.App {
	a := &gradiotest.App{Title: "big outputs"}
	a.Handle("big", func(context.Context, *gradiotest.Call) ([]any, error) {
		return []any{strings.Repeat("b", n)}, nil
	}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	return a
}

// hostileSetup is a hostile replica that sends each stream ~3.9 MiB of
// one event (the 63 MiB of a 256 MiB budget, scaled down 16
// times) and then a byte a second, and a healthy replica whose "big"
// answers 0.56 MiB (9 MB / 16), each behind a pool of its own over one
// shared budget of 16 MiB: one gateway's two replicas, with the calls
// sent to the replica each part of the test needs.
func hostileSetup(t *testing.T, floorWindow time.Duration) (budget *gradio.EventBudget, hp, gp *pool.Pool) {
	app := bigOutputApp(shareOutput)
	bad := gradiotest.NewUnstartedServer(app)
	bad.Hostile, bad.HostileBytes = gradiotest.HostileTrickleLine, shareEvent
	bad.DefaultConcurrencyLimit = -1
	bad.Start()
	t.Cleanup(bad.Close)
	good := gradiotest.NewUnstartedServer(app)
	good.DefaultConcurrencyLimit = -1
	good.Start()
	t.Cleanup(good.Close)
	budget = gradio.NewEventBudget(shareTotal)
	budget.SetRateFloor(sse.DefaultRateFloor, floorWindow)
	// newPool's 2 s header time-out is for fast failures; these streams
	// carry megabytes under the race detector beside other packages' tests.
	opts := []gradio.Option{gradio.WithEventBudget(budget), gradio.WithHeaderTimeout(30 * time.Second)}
	hp = newPool(t, pool.Config{Replicas: []string{bad.URL}, MinConnections: -1, MaxConnections: shareHostile, ConnectRetries: -1, ClientOptions: opts})
	gp = newPool(t, pool.Config{Replicas: []string{good.URL}, MinConnections: -1, MaxConnections: shareHealthy, ClientOptions: opts})
	return budget, hp, gp
}

const (
	shareTotal   = 16 << 20
	shareEvent   = 63 << 16
	shareOutput  = 9 << 16
	shareHostile = 4
	shareHealthy = 8
)

// startHostile starts the hostile calls and waits (bounded) until their
// streams hold nearly the whole budget; wait returns their errors.
func startHostile(t *testing.T, ctx context.Context, hp *pool.Pool, budget *gradio.EventBudget) (wait func() []error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, shareHostile)
	for i := range shareHostile {
		wg.Go(func() { _, errs[i] = hp.Predict(ctx, "", "big", "x") })
	}
	for i := 0; budget.Held() < shareTotal-2<<20; i++ {
		if i > 4000 {
			t.Fatalf("the hostile streams hold only %d bytes", budget.Held())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return func() []error { wg.Wait(); return errs }
}

// healthyRound runs shareHealthy calls of "big" at once on gp and counts
// those that returned the whole output.
func healthyRound(t *testing.T, ctx context.Context, gp *pool.Pool) (ok int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range shareHealthy {
		wg.Go(func() {
			res, err := gp.Predict(ctx, "", "big", "x")
			if err == nil && len(res.Data) == 1 && len(res.Data[0]) == shareOutput+2 {
				mu.Lock()
				ok++
				mu.Unlock()
			} else if err != nil {
				t.Logf("healthy call: %v", err)
			}
		})
	}
	wg.Wait()
	return ok
}

// TestHostileReplicaCannotTakeTheEventBudget (issue 33): while a hostile
// replica's 4 streams hold nearly the whole budget (rate floor off, so
// that only the fair share acts), other users' outputs on a healthy
// replica sharing it keep succeeding (8 of 8, as without the hostile
// replica): the healthy replica is under its fair share and takes the
// room back; the hostile streams cut for it end with ErrBudgetReclaimed,
// charged to the hostile replica, and the healthy one counts no error.
func TestHostileReplicaCannotTakeTheEventBudget(t *testing.T) {
	budget, hp, gp := hostileSetup(t, 0)
	budget.SetRateFloor(0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	baseline := healthyRound(t, ctx, gp)
	hctx, stopHostile := context.WithCancel(ctx)
	wait := startHostile(t, hctx, hp, budget)
	held := budget.Held()
	withHostile := healthyRound(t, ctx, gp)
	stopHostile() // the streams not cut would trickle on: the floor is off here
	errs := wait()
	if baseline != shareHealthy || withHostile != shareHealthy {
		t.Errorf("healthy calls ok: %d/%d without the hostile replica, %d/%d beside it", baseline, shareHealthy, withHostile, shareHealthy)
	}
	reclaimed := 0
	for _, err := range errs {
		if errors.Is(err, sse.ErrBudgetReclaimed) {
			reclaimed++
		}
	}
	if reclaimed == 0 {
		t.Errorf("no hostile stream was cut for room: %v", errs)
	}
	if e := gp.Stats(ctx).Errors; e != 0 {
		t.Errorf("the healthy replica was charged %d errors", e)
	}
	if e := hp.Stats(ctx).Errors; e == 0 {
		t.Errorf("the hostile replica was charged no error")
	}
	// The streams whose calls were cancelled end when the client lets
	// them go (no call pending: 5 s of silence); then every byte is back.
	for i := 0; budget.Held() != 0; i++ {
		if i > 3000 {
			t.Fatalf("after the calls the budget counts %d bytes", budget.Held())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("healthy %d/%d, then %d/%d beside %d hostile calls holding %.1f MiB of %d MiB; %d hostile streams reclaimed",
		baseline, shareHealthy, withHostile, shareHealthy, shareHostile, float64(held)/(1<<20), shareTotal>>20, reclaimed)
}

// TestHostileTrickleCutByRateFloor (issue 33): the same hostile streams,
// alone, do not hold the budget for ever: a byte a second is under the
// rate floor, so each is cut (ErrTooSlow, an ErrEventTooLarge) after a
// window or two (1 s here, 10 s by default), and the budget is whole
// again.
func TestHostileTrickleCutByRateFloor(t *testing.T) {
	budget, hp, _ := hostileSetup(t, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := startHostile(t, ctx, hp, budget)()
	for i, err := range errs {
		if !errors.Is(err, sse.ErrTooSlow) || ctx.Err() != nil {
			t.Errorf("hostile call %d: %v, want ErrTooSlow", i, err)
		}
	}
	if h := budget.Held(); h != 0 {
		t.Errorf("after the calls the budget counts %d bytes", h)
	}
}
