package gradio_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/sse"
)

func liveHeap() int64 {
	runtime.GC()
	runtime.GC() // twice: what sync.Pools kept is gone too
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// undeliveredResults runs calls of "big" (size bytes of output each) on
// a simulated app, each on a session of its own (a stream per call, as a
// pool's), charged to budget; it returns their jobs done and not
// released, once the sessions and the simulator (which runs in this
// process and keeps its own copies) are closed and their goroutines gone:
// what is left live is what the jobs hold.
func undeliveredResults(t *testing.T, budget *gradio.EventBudget, calls, size int) []*gradio.Job {
	t.Helper()
	goroutines := runtime.NumGoroutine()
	app := gradiotest.NewApp()
	app.Handle("big", func(_ context.Context, c *gradiotest.Call) ([]any, error) {
		n, err := c.Float(0)
		return []any{strings.Repeat("r", int(n))}, err
	}, []gradiotest.Component{gradiotest.Number("n")}, []gradiotest.Component{gradiotest.Textbox("out")}).ConcurrencyLimit = -1
	srv := gradiotest.NewServer(app)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := gradio.Connect(ctx, srv.URL, gradio.WithEventBudget(budget))
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]*gradio.Job, calls)
	sessions := make([]*gradio.Client, calls)
	for i := range sessions {
		sessions[i] = c.NewSession()
		if jobs[i], err = sessions[i].Submit(ctx, "big", size); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range jobs {
		if out, err := j.Wait(ctx); err != nil || len(out) != 1 || len(out[0]) != size+2 {
			t.Fatalf("result: %d outputs, %v", len(out), err)
		}
	}
	for _, s := range sessions {
		s.Close()
	}
	c.Close()
	srv.Close()
	for i := 0; runtime.NumGoroutine() > goroutines; i++ {
		if i > 20000 { // a hang guard, not a measure
			t.Fatalf("%d goroutines left after the sessions and the simulator closed (%d before)", runtime.NumGoroutine(), goroutines)
		}
		time.Sleep(time.Millisecond)
	}
	return jobs
}

// TestEventBudgetCountsUndeliveredResults (issue 33 item 2): a large
// result, once its event is read and decoded, stays counted in the event
// budget (its call's party) until its job is released, after its stream
// has let the event go and ended: the live heap of results nobody has
// taken yet is what the budget counts, but for a small slack a call.
// Before, the count ended with the read: 8 results of 1 MiB held
// undelivered were 8 MiB live beyond a count of 0.
func TestEventBudgetCountsUndeliveredResults(t *testing.T) {
	const (
		calls = 8
		size  = 1 << 20
	)
	budget := gradio.NewEventBudget(1 << 30) // room for all: no cut
	budget.SetRateFloor(0, 0)
	base := liveHeap()
	jobs := undeliveredResults(t, budget, calls, size)
	live, held := liveHeap()-base, budget.Held()
	slack := int64(calls) * sse.DefaultAllowance // per call: an output of the allowance's size is not charged
	t.Logf("%d results of %d KiB done, not released: live %.1f MiB, the budget counts %.1f MiB (slack %.1f MiB)",
		calls, size>>10, float64(live)/(1<<20), float64(held)/(1<<20), float64(slack)/(1<<20))
	if live-held > slack {
		t.Errorf("the undelivered results are %.1f MiB live beyond the %.1f MiB the budget counts (at most %.1f MiB)",
			float64(live-held)/(1<<20), float64(held)/(1<<20), float64(slack)/(1<<20))
	}
	if held > live+slack {
		t.Errorf("the budget counts %.1f MiB for %.1f MiB live", float64(held)/(1<<20), float64(live)/(1<<20))
	}
	for _, j := range jobs {
		j.Release()
	}
	if n := budget.Held(); n != 0 {
		t.Errorf("after Release the budget still counts %d bytes", n)
	}
}

// TestEventBudgetCountsEarlyMessages (issue 33 item 2): a large message
// that crosses the stream before its call's join has returned is kept for
// that call (the client cannot tell whose it is yet) and stays counted in
// the event budget while kept, then as the call's result until released.
// Before, its count ended with the read: a replica could park up to 1024
// such messages per session outside the budget.
func TestEventBudgetCountsEarlyMessages(t *testing.T) {
	const size = 1 << 20
	budget := gradio.NewEventBudget(1 << 30)
	budget.SetRateFloor(0, 0)
	big := fmt.Sprintf(`{"msg":"process_completed","event_id":"ev-big","output":{"data":[%q]},"success":true}`, strings.Repeat("b", size))
	app := &scriptedApp{msgs: make(chan string, 100), written: make(chan string, 100)}
	var heldEarly atomic.Int64
	holdEventsCh := make(chan (<-chan gradio.Event), 1) // to the server's goroutine
	app.onJoin = func(id string) {
		switch id {
		case "ev-hold":
			app.msgs <- `{"msg":"estimation","event_id":"ev-hold","rank":0,"queue_size":2,"rank_eta":null}`
		case "ev-big":
			// The whole event crosses the stream before its join answers,
			// then a message of the other call: once the client has
			// passed that one on, it has dispatched the first.
			app.msgs <- big
			app.msgs <- `{"msg":"estimation","event_id":"ev-hold","rank":0,"queue_size":1,"rank_eta":null}`
			select {
			case <-<-holdEventsCh:
			case <-time.After(time.Minute): // a hang guard
			}
			heldEarly.Store(budget.Held())
		}
	}
	srv := httptest.NewServer(app)
	defer srv.Close()
	c := connect(t, srv.URL, gradio.WithHeartbeat(false), gradio.WithEventBudget(budget))
	defer c.Close() // before srv.Close, which waits for the stream handler
	ctx := testCtx(t)
	hold, err := c.Submit(ctx, "echo", "hold")
	if err != nil {
		t.Fatal(err)
	}
	holdEvents := hold.Events()
	holdEventsCh <- holdEvents
	<-holdEvents // the stream is open: the next join's messages may come first
	j, err := c.Submit(ctx, "echo", "big")
	if err != nil {
		t.Fatal(err)
	}
	if n := heldEarly.Load(); n < size {
		t.Errorf("while its join was in flight the kept message counted %d bytes, want at least %d", n, size)
	}
	if out, err := j.Wait(ctx); err != nil || len(out) != 1 || len(out[0]) != size+2 {
		t.Fatalf("big: %d outputs, %v", len(out), err)
	}
	if n := budget.Held(); n < size {
		t.Errorf("the undelivered result counts %d bytes, want at least %d", n, size)
	}
	j.Release()
	if n := budget.Held(); n != 0 {
		t.Errorf("after Release the budget still counts %d bytes", n)
	}
	app.msgs <- completed("ev-hold", "HOLD")
	for range holdEvents {
	}
	if _, err := hold.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLongGeneratorKeepsNoOutputHistory: a generator's partial outputs
// are not all kept for the job's life when the caller reads them from
// Events (SubmitOptions.NoOutputs) or not at all (Quiet): a long streaming
// call (an LLM's cumulative text, fifty 10-minute calls at once) would
// otherwise hold every output it has streamed, outside any budget. The
// live heap is measured while the generator waits after its outputs, its
// job still running.
func TestLongGeneratorKeepsNoOutputHistory(t *testing.T) {
	const (
		outputs = 100
		size    = 100 << 10
	)
	for _, tc := range []struct {
		name string
		opts gradio.SubmitOptions
		read bool // the caller reads Events
	}{
		{"events read, no outputs kept", gradio.SubmitOptions{NoOutputs: true}, true},
		{"quiet", gradio.SubmitOptions{Quiet: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := make(chan struct{})
			yielded := make(chan struct{})
			app := gradiotest.NewApp()
			app.HandleGenerator("stream", func(ctx context.Context, _ *gradiotest.Call, yield func(...any) error) error {
				for i := range outputs {
					if err := yield(fmt.Sprintf("%d%s", i, strings.Repeat("s", size))); err != nil {
						return err
					}
				}
				close(yielded)
				select {
				case <-gate:
				case <-ctx.Done():
				}
				return yield("end")
			}, []gradiotest.Component{gradiotest.Number("n")}, []gradiotest.Component{gradiotest.Textbox("out")})
			srv := gradiotest.NewServer(app)
			defer srv.Close()
			c := connect(t, srv.URL)
			defer c.Close()
			ctx := testCtx(t)
			base := liveHeap()
			all := make(chan struct{}) // the client has every partial output
			n := 0
			opts := tc.opts
			opts.Hook = func(ev gradio.Event) {
				if ev.Kind == gradio.EventOutput {
					if n++; n == outputs {
						close(all)
					}
				}
			}
			j, err := c.SubmitWith(ctx, opts, "stream", 0)
			if err != nil {
				t.Fatal(err)
			}
			drained, readAll := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(drained)
				if !tc.read {
					close(readAll)
					return
				}
				k := 0
				for ev := range j.Events() {
					if ev.Kind == gradio.EventOutput {
						if k++; k == outputs {
							close(readAll)
						}
					}
				}
			}()
			<-all
			<-readAll
			<-yielded
			live := liveHeap() - base
			t.Logf("%d outputs of %d KiB streamed, job running: %.1f MiB live", outputs, size>>10, float64(live)/(1<<20))
			if limit := int64(outputs * size / 4); live > limit {
				t.Errorf("%.1f MiB live while the job runs, want at most %.1f MiB (the outputs are %.1f MiB)",
					float64(live)/(1<<20), float64(limit)/(1<<20), float64(outputs*size)/(1<<20))
			}
			if k := len(j.Outputs()); k != 0 {
				t.Errorf("Outputs kept %d outputs", k)
			}
			close(gate)
			if out, err := j.Wait(ctx); err != nil || len(out) != 1 || str(t, out[0]) != "end" {
				t.Fatalf("result %v, %v", out, err)
			}
			<-drained
		})
	}
}
