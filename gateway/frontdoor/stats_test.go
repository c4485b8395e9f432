package frontdoor_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorCallsInEndpointStats: front-door calls feed the pool's
// per-endpoint figures (the pool-stats endpoints of their replica), as
// /v1 calls do; before, thousands of front-door calls left them empty.
func TestFrontDoorCallsInEndpointStats(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	t.Cleanup(sim.Close)
	srv, _, p := newDoorOver(t, []string{sim.URL}, nil)
	fn := fdtest.FnIndex(t, srv.URL, "upper")
	for i := range 5 {
		if got := fdtest.Call(t, srv.URL, fmt.Sprintf("stats%d", i), fn, "x"); got != "X" {
			t.Fatalf("call %d: %q", i, got)
		}
	}
	name := p.Replicas()[0]
	ep, ok := p.Stats(context.Background()).Pools[name].Endpoints["upper"]
	if !ok || ep.ProcessTime <= 0 {
		t.Fatalf("pool-stats figures of /upper after 5 front-door calls: %+v (present %v), want a run time", ep, ok)
	}
}
