package gradio_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestStress runs many sessions with concurrent calls, some cancelled
// mid-way, on every sse_v1+ protocol: every call must end (result or the
// ctx error), nothing may hang or leak, and each session stays usable.
func TestStress(t *testing.T) {
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio4SSEv2, gradiotest.Gradio4SSE} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, func(s *gradiotest.Server) { s.DefaultConcurrencyLimit = -1 })
			c := connect(t, srv.URL)
			var wg sync.WaitGroup
			for sess := 0; sess < 8; sess++ {
				s := c.NewSession()
				defer s.Close()
				for call := 0; call < 6; call++ {
					wg.Add(1)
					go func(seed uint64) {
						defer wg.Done()
						r := rand.New(rand.NewPCG(seed, 1))
						ctx, cancel := context.WithTimeout(testCtx(t), time.Duration(r.IntN(80))*time.Millisecond)
						defer cancel()
						var err error
						switch r.IntN(3) {
						case 0:
							_, err = s.Predict(ctx, "upper", "x")
						case 1:
							var j *gradio.Job
							if j, err = s.Submit(ctx, "count", 5); err == nil {
								for range j.Events() {
								}
								_, err = j.Wait(testCtx(t))
							}
						case 2:
							_, err = s.Predict(ctx, "slow", 3)
						}
						if err != nil && !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("call: %v", err)
						}
					}(uint64(sess*100 + call))
				}
			}
			wg.Wait()
			// Every session still works.
			for i := 0; i < 3; i++ {
				s := c.NewSession()
				out, err := s.Predict(testCtx(t), "upper", fmt.Sprint("ok", i))
				s.Close()
				if err != nil || str(t, out[0]) != fmt.Sprint("OK", i) {
					t.Fatalf("after stress: %s %v", out, err)
				}
			}
		})
	}
}
