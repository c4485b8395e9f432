package pool_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// slotCall is one front-door call as the front door drives its Slot: a
// join accepted, then the messages of its stream relayed (Observe).
// Its endpoint is named as the front door names it: "fn_index=N".
func slotCall(t *testing.T, p *pool.Pool, replica string) *pool.Slot {
	t.Helper()
	app, err := p.App(ctxT(t), replica)
	if err != nil {
		t.Fatal(err)
	}
	d, err := app.Config().Endpoint("upper")
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Reserve(ctxT(t), "", pool.ReserveOptions{Replica: replica, Endpoint: fmt.Sprintf("fn_index=%d", d.FnIndex)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSlotCallsFeedEndpointStats (issue 36 item 8): calls sent under a
// Slot (the Gradio front door's) feed the replica's per-endpoint figures
// and the concurrency_limited warning as the pool's own calls do, from the
// messages the front door relays (Slot.Observe). One call runs, a second
// waits in the Space's queue behind it for over half a run: the warning
// fires once, with an effective concurrency of 1. Two calls that start at
// once: effective concurrency 2, no warning.
func TestSlotCallsFeedEndpointStats(t *testing.T) {
	msg := func(s string, args ...any) []byte { return []byte(fmt.Sprintf(s, args...)) }
	starts := msg(`{"msg":"process_starts","event_id":"e","eta":0.1}`)
	queued := msg(`{"msg":"estimation","event_id":"e","rank":0,"queue_size":1,"rank_eta":0.1}`)
	done := msg(`{"msg":"process_completed","event_id":"e","output":{"data":["X"]},"success":true}`)

	t.Run("limited", func(t *testing.T) {
		srvs := replicas(t, 1)
		rec := &recorder{}
		p := newPool(t, pool.Config{Replicas: urls(srvs), OnEvent: rec.hook})
		name := p.Replicas()[0]
		a := slotCall(t, p, name)
		b := slotCall(t, p, name)
		a.Done(gradio.JoinAccepted, nil)
		a.Observe(starts)
		b.Done(gradio.JoinAccepted, nil)
		b.Observe(queued)                 // behind our running call
		time.Sleep(80 * time.Millisecond) // over half the Space's 100 ms run
		a.Observe(done)
		a.Release()
		b.Observe(starts)
		b.Observe(done)
		b.Release()
		waitUntil(t, func() bool { return rec.count(pool.EventConcurrencyLimited, name) == 1 })
		ep, ok := p.Stats(t.Context()).Pools[name].Endpoints["upper"]
		if !ok || ep.Concurrency != 1 || ep.ProcessTime <= 0 {
			t.Fatalf("per-endpoint figures of the slot calls: %+v (present %v), want effective concurrency 1 and a run time", ep, ok)
		}
	})
	t.Run("not limited", func(t *testing.T) {
		srvs := replicas(t, 1)
		rec := &recorder{}
		p := newPool(t, pool.Config{Replicas: urls(srvs), OnEvent: rec.hook})
		name := p.Replicas()[0]
		a := slotCall(t, p, name)
		b := slotCall(t, p, name)
		a.Done(gradio.JoinAccepted, nil)
		b.Done(gradio.JoinAccepted, nil)
		a.Observe(starts)
		b.Observe(starts)
		time.Sleep(20 * time.Millisecond)
		a.Observe(done)
		b.Observe(done)
		a.Release()
		b.Release()
		ep := p.Stats(t.Context()).Pools[name].Endpoints["upper"]
		if ep.Concurrency != 2 {
			t.Fatalf("two slot calls started at once: effective concurrency %d, want 2", ep.Concurrency)
		}
		if n := rec.count(pool.EventConcurrencyLimited, name); n != 0 {
			t.Fatalf("concurrency_limited fired %d times for an endpoint whose limit was not reached", n)
		}
	})
}
