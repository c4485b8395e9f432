package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestGreedyKeyCannotTakeTheEventBudget (issue 33 item 2): through
// /v1/predict, one API key pulling 3.9 MiB outputs in 12 parallel calls on
// a healthy replica does not make another key's 0.56 MiB outputs on the
// same replica fail (the 256 MiB budget and 63 MiB / 9 MB outputs of the
// issue, scaled down 16 times): each key is a party of the replica's part
// of upstream_event_bytes; the greedy key's streams cut for the other's
// are answered 429 event_share, and the replica is charged no error.
func TestGreedyKeyCannotTakeTheEventBudget(t *testing.T) {
	const (
		total  = 16 << 20
		huge   = 63 << 16
		big    = 9 << 16
		greedy = 12
		others = 8
		rounds = 3
	)
	app := &gradiotest.App{Title: "outputs"}
	for name, n := range map[string]int{"big": big, "huge": huge} {
		app.Handle(name, func(context.Context, *gradiotest.Call) ([]any, error) {
			return []any{strings.Repeat("o", n)}, nil
		}, []gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	}
	srv, _, _, p, _ := frontGatewayApps(t, []*gradiotest.App{app}, func(c *gateway.Config) {
		c.Secrets.APIKeys = []string{"greedy-key", "other-key"}
		c.UpstreamEventBytes = total
		c.MaxCallsPerClient = 64
		c.Pool.MaxConnections = greedy + others
		c.Pool.MinConnections = -1
	})
	call := func(ctx context.Context, key, endpoint string) (int, string, int) {
		return predictAs(ctx, srv.URL, key, endpoint)
	}
	otherRound := func() (ok int) {
		var wg sync.WaitGroup
		var n atomic.Int64
		for range others {
			wg.Go(func() {
				status, code, got := call(context.Background(), "other-key", "big")
				if status == http.StatusOK && got == big {
					n.Add(1)
				} else {
					t.Logf("other key's call: %d %s", status, code)
				}
			})
		}
		wg.Wait()
		return int(n.Load())
	}
	baseline := 0
	for range rounds {
		baseline += otherRound()
	}

	gctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var gOK, gShare, gOther atomic.Int64
	for range greedy {
		wg.Go(func() {
			for gctx.Err() == nil {
				status, code, _ := call(gctx, "greedy-key", "huge")
				switch {
				case status == http.StatusOK:
					gOK.Add(1)
				case status == http.StatusTooManyRequests && code == "event_share":
					gShare.Add(1)
				case gctx.Err() == nil:
					gOther.Add(1)
					t.Logf("greedy key's call: %d %s", status, code)
				}
			}
		})
	}
	for i := 0; gOK.Load()+gShare.Load() == 0; i++ { // the race detector makes a 3.9 MiB answer slow
		if i > 24000 {
			t.Fatal("no greedy call ended in 2 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	beside := 0
	for range rounds {
		beside += otherRound()
	}
	stop()
	wg.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n := rounds * others; baseline != n || beside != n {
		t.Errorf("the other key's calls ok: %d/%d alone, %d/%d beside the greedy key", baseline, n, beside, n)
	}
	if e := p.Stats(ctx).Errors; e != 0 {
		t.Errorf("the healthy replica was charged %d errors", e)
	}
	if gOther.Load() != 0 {
		t.Errorf("%d greedy calls failed otherwise than 429 event_share", gOther.Load())
	}
	t.Logf("other key %d/%d ok alone, %d/%d beside the greedy key (%d ok, %d answered 429 event_share)",
		baseline, rounds*others, beside, rounds*others, gOK.Load(), gShare.Load())
}
