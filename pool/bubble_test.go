package pool_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// bubbleWith is bubble with a hook that sets each simulated replica up
// before it starts (setup may be nil: Gradio's default concurrency of 1
// per endpoint then applies, unlike bubble's unlimited replicas).
func bubbleWith(t *testing.T, n int, cfg pool.Config, setup func(i int, s *gradiotest.Server), f func(t *testing.T, p *pool.Pool, srvs []*gradiotest.Server, hc *http.Client)) {
	synctest.Test(t, func(t *testing.T) {
		pn := newPipeNet()
		srvs := make([]*gradiotest.Server, n)
		for i := range srvs {
			s := gradiotest.NewUnstartedServer(nil)
			s.Listener.Close()
			l := pn.listen()
			s.Listener = l
			if setup != nil {
				setup(i, s)
			}
			s.Start()
			srvs[i] = s
			cfg.Replicas = append(cfg.Replicas, l.url())
		}
		hc := pn.httpClient()
		cfg.ClientOptions = append(cfg.ClientOptions, gradio.WithHTTPClient(hc))
		if cfg.MinConnections == 0 {
			cfg.MinConnections = 1
		}
		p, err := pool.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if err := p.Close(context.Background()); err != nil {
					t.Errorf("Close: %v", err)
				}
				for _, s := range srvs {
					s.Close()
				}
				hc.Transport.(*http.Transport).CloseIdleConnections()
			}()
			f(t, p, srvs, hc)
		}()
		synctest.Wait()
	})
}
