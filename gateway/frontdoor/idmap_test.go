package frontdoor_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/fdtest"
)

// TestFrontDoorMixedComponentIDs: replicas of one app whose releases
// number its components differently (real 4.44.1 and 5.49.1 do: 4.x adds a
// form block) are one app through the front door, either way round: the
// official JS client's conformance suite passes with sessions bound to
// each, no replica is reported as another app.
func TestFrontDoorMixedComponentIDs(t *testing.T) {
	fdtest.NodeOrSkip(t)
	for _, c := range []struct {
		name  string
		modes []gradiotest.Mode
		first []int // FirstComponentID per replica
		args  []string
	}{
		{"gradio5, then gradio5 numbered from 40", []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio5}, []int{0, 40}, nil},
		{"gradio4.44 numbered from 40, then gradio5", []gradiotest.Mode{gradiotest.Gradio4SSEv3, gradiotest.Gradio5}, []int{40, 0}, []string{"--api-prefix", "", "--version-re", `^4\.`}},
		{"gradio5, then gradio3-ws numbered from 40", []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio3WS}, []int{0, 40}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			sims, urls := fdtest.Replicas(t, make([]*gradiotest.App, len(c.modes)), func(i int, s *gradiotest.Server) {
				s.Mode = c.modes[i]
				s.FirstComponentID = c.first[i]
			})
			srv, fd, _ := newDoorOver(t, urls, nil)
			must := append(slices.Clone(bridgeMust), "view_api")
			for i := 0; i < 6 && (sims[0].Executions("counter") == 0 || sims[1].Executions("counter") == 0); i++ {
				conformanceMust(t, asUser(t, srv.URL, fmt.Sprintf("ids%d@example.com", i)), must, c.args...)
			}
			for i, s := range sims {
				if s.Executions("counter") == 0 || s.Executions("reverse_file") == 0 {
					t.Errorf("the %s replica (ids from %d) ran no session's gr.State or file call", c.modes[i], c.first[i])
				}
			}
			if st := fd.Stats(); len(st.Mismatched) != 0 {
				t.Errorf("stats %+v: want no replica reported as another app", st)
			}
		})
	}
}
