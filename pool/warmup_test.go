package pool_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// TestWarmUp: with WarmUp the minimum is open before any call; without
// it nothing connects until the first call (the seed's lazy start).
func TestWarmUp(t *testing.T) {
	for _, warm := range []bool{false, true} {
		cfg := pool.Config{MinConnections: 2, WarmUp: warm}
		bubbleWith(t, 2, cfg, nil, func(t *testing.T, p *pool.Pool, srvs []*gradiotest.Server, _ *http.Client) {
			synctest.Wait()
			st := p.Stats(context.Background())
			want := 0
			if warm {
				want = 4
			}
			if st.TotalConnections != want || st.Initialized != warm {
				t.Errorf("warm_up %v: %d sessions open, initialized %v before any call; want %d, %v", warm, st.TotalConnections, st.Initialized, want, warm)
			}
			if n := srvs[0].Requests("config"); (n > 0) != warm {
				t.Errorf("warm_up %v: %d config fetches before any call", warm, n)
			}
		})
	}
}
