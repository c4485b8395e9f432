package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestUpstreamEventBytesReachesClients: upstream_event_bytes becomes one
// budget shared by the clients of the gateway's replicas (the front door
// relays through them too), each client a party of it: 256 MiB by
// default, the set value, or none when negative.
func TestUpstreamEventBytesReachesClients(t *testing.T) {
	sim := gradiotest.NewServer(nil)
	defer sim.Close()
	for _, tc := range []struct {
		env  string
		want int64
	}{
		{"", gradio.DefaultEventBudgetBytes},
		{"1048576", 1 << 20},
		{"-1", 0},
	} {
		var c gateway.Config
		env := map[string]string{"GRADIOPOOL_REPLICAS": sim.URL}
		if tc.env != "" {
			env["GRADIOPOOL_UPSTREAM_EVENT_BYTES"] = tc.env
		}
		if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
			t.Fatal(err)
		}
		pc := c.PoolConfig(nil, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a, err := gradio.Connect(ctx, sim.URL, pc.ClientOptions...)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		b, err2 := gradio.Connect(ctx, sim.URL, pc.ClientOptions...)
		cancel()
		if err2 != nil {
			t.Fatal(err2)
		}
		if got := a.EventBudget().Total(); got != tc.want {
			t.Errorf("upstream_event_bytes %q: budget of %d bytes, want %d", tc.env, got, tc.want)
		}
		if a.EventBudget().Root() != b.EventBudget().Root() {
			t.Errorf("upstream_event_bytes %q: two replicas' clients have budgets of their own", tc.env)
		}
		if tc.want != 0 && a.EventBudget() == b.EventBudget() {
			t.Errorf("upstream_event_bytes %q: two replicas' clients are one party of the budget", tc.env)
		}
		a.Close()
		b.Close()
	}
}
