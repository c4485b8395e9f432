package gradio_test

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

// TestRealRender runs against a real Gradio 4.44+ server serving
// testdata/realgradio/render_app.py (see docs/COMPATIBILITY.md):
//
//	ROOT=/tmp/realgradio bash testdata/realgradio/start.sh render_app.py 5.49.1 7891
//	GRADIOPOOL_REAL_RENDER_URL=http://127.0.0.1:7891 go test -run TestRealRender ./gradio/
func TestRealRender(t *testing.T) {
	url := os.Getenv("GRADIOPOOL_REAL_RENDER_URL")
	if url == "" {
		t.Skip("GRADIOPOOL_REAL_RENDER_URL unset: no real gr.render app to test against")
	}
	c := connect(t, url)
	defer c.Close()
	ctx := testCtx(t)
	if _, err := c.Predict(ctx, "shout_0", "hi"); !errors.Is(err, gradio.ErrUnknownEndpoint) {
		t.Fatalf("shout_0 before the render: %v, want ErrUnknownEndpoint", err)
	}
	// The render function is "apply" (gr.render's api_name, hidden from
	// /info). Rendering n blocks creates n endpoints; a re-render replaces
	// them, and real Gradio (5.49.1) then names them anew (shout_0_1: the
	// old name was still taken when the new block was made), so the test
	// calls whatever the render_config named.
	var before []string
	for _, n := range []int{2, 1, 3} {
		if _, err := c.Predict(ctx, "apply", n); err != nil {
			t.Fatalf("render %d: %v", n, err)
		}
		var names []string
		for _, d := range c.Config().Dependencies {
			if d.RenderedIn != nil {
				names = append(names, d.APIName)
			}
		}
		if len(names) != n {
			t.Fatalf("after rendering %d: rendered endpoints %v", n, names)
		}
		var outs []string
		for _, name := range names {
			out, err := c.Predict(ctx, name, "hi")
			if err != nil {
				t.Fatalf("after rendering %d: %s: %v", n, name, err)
			}
			outs = append(outs, str(t, out[0]))
		}
		slices.Sort(outs)
		var want []string
		for i := n; i >= 1; i-- {
			want = append(want, "HI"+strings.Repeat("!", i))
		}
		slices.Sort(want)
		if !slices.Equal(outs, want) {
			t.Errorf("after rendering %d: outputs %v, want %v", n, outs, want)
		}
		for _, old := range before {
			if !slices.Contains(names, old) {
				if _, err := c.Predict(ctx, old, "hi"); !errors.Is(err, gradio.ErrUnknownEndpoint) {
					t.Errorf("after rendering %d: the replaced %s answered %v, want ErrUnknownEndpoint", n, old, err)
				}
			}
		}
		t.Logf("rendered %d: %v", n, names)
		before = names
	}
	// Rendered blocks live in the session that rendered them: a new
	// session does not know them.
	other := c.NewSession()
	defer other.Close()
	if _, err := other.Predict(ctx, before[0], "hi"); !errors.Is(err, gradio.ErrUnknownEndpoint) {
		t.Errorf("%s from a new session: %v, want ErrUnknownEndpoint", before[0], err)
	}
}
