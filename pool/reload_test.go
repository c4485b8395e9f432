package pool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// gatedApp has one endpoint, "hold", whose calls run until gate is closed
// (or their context ends): calls in flight that a test controls.
func gatedApp(gate <-chan struct{}) *gradiotest.App {
	a := gradiotest.NewApp()
	a.Handle("hold", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		select {
		case <-gate:
			return []any{"done"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}, nil, nil)
	return a
}

type callResult struct {
	replica string
	err     error
}

func goPredict(p *pool.Pool, user string) <-chan callResult {
	out := make(chan callResult, 1)
	go func() {
		res, err := p.Predict(context.Background(), user, "hold", "x")
		r := callResult{err: err}
		if res != nil {
			r.replica = res.Replica
		}
		out <- r
	}()
	return out
}

// TestReconfigureReplicas: a reload that replaces replica A by B cuts no
// call: A's call in flight finishes on A, the caller waiting in A's queue
// moves to B, new calls go to B, A's app stays reachable while its call
// runs (a front-door event stream opens after its join) and A is closed
// once drained.
func TestReconfigureReplicas(t *testing.T) {
	gate := make(chan struct{})
	srvs := unlimitedReplicas(t, gatedApp(gate), 2)
	a, b := srvs[0], srvs[1]
	p := newPool(t, pool.Config{Replicas: []string{a.URL}, MinConnections: -1, MaxConnections: 1})
	nameA := p.Replicas()[0]
	inFlight := goPredict(p, "")
	waitUntil(t, func() bool { return a.Snapshot().Running == 1 })
	waiting := goPredict(p, user(1))
	waitUntil(t, func() bool { return p.Stats(ctxT(t)).Pools[nameA].QueueLength == 1 })

	if err := p.Reconfigure(pool.Config{Replicas: []string{b.URL}, MinConnections: -1, MaxConnections: 1}); err != nil {
		t.Fatal(err)
	}
	if got := p.Replicas(); len(got) != 1 || got[0] == nameA {
		t.Fatalf("replicas after reload = %v, want B only", got)
	}
	nameB := p.Replicas()[0]
	// The waiter moved to B and runs there; A's call still runs.
	waitUntil(t, func() bool { return b.Snapshot().Running == 1 })
	if n := a.Snapshot().Running; n != 1 {
		t.Fatalf("A's call in flight: running = %d, want 1", n)
	}
	if _, err := p.App(ctxT(t), nameA); err != nil {
		t.Errorf("App(%s) while its call runs: %v", nameA, err)
	}
	close(gate)
	if r := <-inFlight; r.err != nil || r.replica != nameA {
		t.Errorf("call in flight on the removed replica: %+v, want a result from %s", r, nameA)
	}
	if r := <-waiting; r.err != nil || r.replica != nameB {
		t.Errorf("call waiting on the removed replica: %+v, want a result from %s", r, nameB)
	}
	if r := <-goPredict(p, user(1)); r.err != nil || r.replica != nameB {
		t.Errorf("new call after the reload: %+v, want %s", r, nameB)
	}
	// Drained: A is closed and forgotten.
	waitUntil(t, func() bool {
		_, err := p.App(ctxT(t), nameA)
		return err != nil
	})
	if _, ok := p.Stats(ctxT(t)).Pools[nameA]; ok {
		t.Error("the removed replica is still in Stats")
	}
}

// TestReconfigureKeepsReplicas: a replica still listed keeps its name and
// warm sessions; one added next to it gets a name of its own and serves.
func TestReconfigureKeepsReplicas(t *testing.T) {
	srvs := replicas(t, 2)
	p := newPool(t, pool.Config{Replicas: []string{srvs[0].URL}, MinConnections: 2, MaxConnections: 3})
	p.Warm()
	name0 := p.Replicas()[0]
	waitUntil(t, func() bool { return p.Stats(ctxT(t)).Pools[name0].TotalConnections == 2 })
	created := p.Stats(ctxT(t)).Pools[name0].SessionsCreated
	if err := p.Reconfigure(pool.Config{Replicas: []string{srvs[0].URL + "/", srvs[1].URL}, MinConnections: 2, MaxConnections: 3}); err != nil {
		t.Fatal(err)
	}
	got := p.Replicas()
	if len(got) != 2 || got[0] != name0 || got[1] == name0 {
		t.Fatalf("replicas = %v, want %s kept and a new name", got, name0)
	}
	// The added replica warms up like the others (the pool is initialised).
	waitUntil(t, func() bool { return p.Stats(ctxT(t)).Pools[got[1]].TotalConnections == 2 })
	if st := p.Stats(ctxT(t)).Pools[name0]; st.SessionsCreated != created || st.SessionsDestroyed != 0 {
		t.Errorf("kept replica's sessions: created %d (was %d), destroyed %d", st.SessionsCreated, created, st.SessionsDestroyed)
	}
	var served []string
	for i := range 4 {
		res, err := p.Predict(ctxT(t), user(i), "upper", "a")
		if err != nil {
			t.Fatal(err)
		}
		served = append(served, res.Replica)
	}
	if !slices.Contains(served, got[1]) {
		t.Errorf("the added replica served none of %v", served)
	}
}

// TestReconfigureSizes: pool sizes and the queue time-out change in place:
// a higher maximum serves a waiter at once, a lower one cuts no call in
// flight, and a shorter queue time-out applies to the next waiter.
func TestReconfigureSizes(t *testing.T) {
	gate := make(chan struct{})
	srvs := unlimitedReplicas(t, gatedApp(gate), 1)
	cfg := pool.Config{Replicas: urls(srvs), MinConnections: -1, MaxConnections: 1}
	p := newPool(t, cfg)
	name := p.Replicas()[0]
	first := goPredict(p, "")
	waitUntil(t, func() bool { return srvs[0].Snapshot().Running == 1 })
	second := goPredict(p, "")
	waitUntil(t, func() bool { return p.Stats(ctxT(t)).Pools[name].QueueLength == 1 })

	cfg.MaxConnections = 2
	if err := p.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return srvs[0].Snapshot().Running == 2 })

	// Down to 1 with 2 calls in flight, and a queue time-out that a
	// waiter cannot outlive: the next caller gets ErrQueueTimeout.
	cfg.MaxConnections, cfg.QueueTimeout = 1, 1
	if err := p.Reconfigure(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Predict(ctxT(t), "", "hold", "x"); !errors.Is(err, pool.ErrQueueTimeout) {
		t.Errorf("call past the new maximum with a 1ns queue time-out: %v, want ErrQueueTimeout", err)
	}
	if n := srvs[0].Snapshot().Running; n != 2 {
		t.Errorf("calls in flight after lowering the maximum: %d, want 2", n)
	}
	close(gate)
	for _, c := range []<-chan callResult{first, second} {
		if r := <-c; r.err != nil {
			t.Errorf("call in flight across the resize: %v", r.err)
		}
	}
	// Back within the new maximum: one session is left.
	waitUntil(t, func() bool { return p.Stats(ctxT(t)).Pools[name].TotalConnections <= 1 })
}

// TestReconfigureBadInput: a bad configuration is refused and changes
// nothing; after Close, Reconfigure answers ErrClosed.
func TestReconfigureBadInput(t *testing.T) {
	srvs := replicas(t, 1)
	p, err := pool.New(pool.Config{Replicas: urls(srvs)})
	if err != nil {
		t.Fatal(err)
	}
	before := p.Replicas()
	for _, cfg := range []pool.Config{
		{},
		{Replicas: []string{" "}},
		{Replicas: []string{srvs[0].URL, srvs[0].URL + "/"}},
		{Replicas: urls(srvs), MaxConnections: -1},
	} {
		if err := p.Reconfigure(cfg); err == nil {
			t.Errorf("Reconfigure(%+v) succeeded", cfg)
		}
	}
	if got := p.Replicas(); !slices.Equal(got, before) {
		t.Errorf("replicas after refused reloads = %v, want %v", got, before)
	}
	if err := p.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := p.Reconfigure(pool.Config{Replicas: urls(srvs)}); !errors.Is(err, pool.ErrClosed) {
		t.Errorf("Reconfigure after Close: %v, want ErrClosed", err)
	}
}

// TestReconfigureUnderLoad: calls running and waiting while the replica
// list changes again and again all succeed (none is cut, none is lost in
// the queue of a removed replica), with registered and anonymous users.
func TestReconfigureUnderLoad(t *testing.T) {
	srvs := replicas(t, 3)
	u := urls(srvs)
	lists := [][]string{{u[0], u[1]}, {u[1], u[2]}, {u[2]}, {u[0], u[2]}, {u[0], u[1], u[2]}, {u[0]}}
	p := newPool(t, pool.Config{Replicas: lists[0], MinConnections: -1, MaxConnections: 2, StickySessions: true})
	const callers, calls = 8, 15
	errs := make(chan error, callers*calls)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			who := ""
			if i%2 == 0 {
				who = user(i)
			}
			for range calls {
				if _, err := p.Predict(ctxT(t), who, "upper", "x"); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range 12 {
		if err := p.Reconfigure(pool.Config{Replicas: lists[(i+1)%len(lists)], MinConnections: -1, MaxConnections: 1 + i%3}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // let calls land between reloads (not a timed assertion)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("call during reloads: %v", err)
	}
}

// holdLimiter grants every permit at once, except the first one asked for
// after armed is set: it tells entered which replica that is, waits for
// release, then refuses it as full (the call moves to its next replica).
// It holds a call on its first replica while the test reconfigures.
type holdLimiter struct {
	armed   atomic.Bool
	entered chan string
	release chan struct{}
}

type nopPermit struct{}

func (nopPermit) Release() {}

func (h *holdLimiter) Acquire(ctx context.Context, replica string, _ pool.Priority) (pool.Permit, error) {
	if !h.armed.CompareAndSwap(true, false) {
		return nopPermit{}, nil
	}
	h.entered <- replica
	select {
	case <-h.release:
		return nil, fmt.Errorf("held by the test: %w", pool.ErrQueueFull)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (h *holdLimiter) Waiting(string) int { return 0 }

// TestReconfigureReroutesStaleOrder: a call walks the replicas in an order
// made from the list it found. A Reconfigure that removes the rest of that
// order while the call waits on its first replica sends the call to the new
// list, whether the removed replicas are still draining or already closed:
// the caller sees no error (TestReconfigureUnderLoad's rare flake, with the
// interleaving held by a Limiter instead of left to the scheduler).
func TestReconfigureReroutesStaleOrder(t *testing.T) {
	for _, drained := range []bool{false, true} {
		t.Run(fmt.Sprintf("drained=%v", drained), func(t *testing.T) {
			srvs := replicas(t, 3)
			lim := &holdLimiter{entered: make(chan string, 1), release: make(chan struct{})}
			p := newPool(t, pool.Config{Replicas: []string{srvs[0].URL, srvs[1].URL}, MinConnections: -1, Limiter: lim})
			before := p.Replicas()
			if !drained {
				// A slot in use on each keeps both draining, not closed.
				for _, name := range before {
					s, err := p.Reserve(ctxT(t), "", pool.ReserveOptions{Replica: name})
					if err != nil {
						t.Fatal(err)
					}
					defer s.Release()
				}
			}
			lim.armed.Store(true)
			out := make(chan callResult, 1)
			ctx := ctxT(t)
			go func() {
				res, err := p.Predict(ctx, "", "upper", "a")
				r := callResult{err: err}
				if res != nil {
					r.replica = res.Replica
				}
				out <- r
			}()
			var held string
			select {
			case held = <-lim.entered: // the call's order is made: it waits on its first replica
			case r := <-out:
				t.Fatalf("the call returned before it asked for a permit: replica %q, error %v", r.replica, r.err)
			}
			if err := p.Reconfigure(pool.Config{Replicas: []string{srvs[2].URL}, MinConnections: -1}); err != nil {
				t.Fatal(err)
			}
			nameC := p.Replicas()[0]
			if drained {
				for _, name := range before {
					waitUntil(t, func() bool { _, err := p.App(ctxT(t), name); return err != nil })
				}
			}
			close(lim.release)
			select {
			case r := <-out:
				if r.err != nil || r.replica != nameC {
					t.Errorf("call held on %s while %v were removed: replica %q, error %v; want a result from %s", held, before, r.replica, r.err, nameC)
				}
			case <-time.After(20 * time.Second): // hang guard
				t.Fatal("the call did not return")
			}
		})
	}
}
