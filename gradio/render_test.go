package gradio_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// renderApp is a gr.render app: "show" (render id 0, as real Gradio's
// first) renders a block whose button is
// the "shout" endpoint, absent from the app's own config.
func renderApp() *gradiotest.App {
	app := gradiotest.NewApp()
	app.Handle("show", func(_ context.Context, c *gradiotest.Call) ([]any, error) {
		s, err := c.String(0)
		return []any{"shown " + s}, err
	}, nil, nil).Renders = new(0)
	app.Handle("shout", func(_ context.Context, c *gradiotest.Call) ([]any, error) {
		s, err := c.String(0)
		return []any{strings.ToUpper(s) + "!"}, err
	}, nil, nil).RenderedIn = new(0)
	return app
}

func countAPI(cfg *gradio.Config, name string) int {
	n := 0
	for _, d := range cfg.Dependencies {
		if d.APIName == name {
			n++
		}
	}
	return n
}

func TestRenderConfigMerged(t *testing.T) {
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio6} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, renderApp(), nil)
			a := connect(t, srv.URL)
			defer a.Close()
			ctx := testCtx(t)
			if _, err := a.Predict(ctx, "shout", "hi"); !errors.Is(err, gradio.ErrUnknownEndpoint) {
				t.Fatalf("shout before the render: %v, want ErrUnknownEndpoint", err)
			}
			for round := 0; round < 2; round++ {
				out, err := a.Predict(ctx, "show", "x")
				if err != nil {
					t.Fatal(err)
				}
				if got := str(t, out[0]); got != "shown x" {
					t.Fatalf("show: %q", got)
				}
				// A second run of the same render replaces the first one's
				// blocks rather than adding to them.
				if n := countAPI(a.Config(), "shout"); n != 1 {
					t.Fatalf("round %d: %d shout dependencies in the session's config, want 1", round, n)
				}
				d, err := a.Config().Endpoint("shout")
				if err != nil {
					t.Fatal(err)
				}
				if d.RenderedIn == nil || *d.RenderedIn != 0 {
					t.Errorf("shout rendered_in %v, want 0", d.RenderedIn)
				}
				for _, id := range d.Inputs {
					if a.Config().Component(id) == nil {
						t.Errorf("rendered input component %d missing from the merged config", id)
					}
				}
				out, err = a.Predict(ctx, "shout", "hi")
				if err != nil {
					t.Fatalf("round %d: shout after the render: %v", round, err)
				}
				if got := str(t, out[0]); got != "HI!" {
					t.Fatalf("shout: %q", got)
				}
			}
			if sd, _ := a.Config().Endpoint("show"); sd == nil || sd.RenderID == nil || *sd.RenderID != 0 {
				t.Errorf("show's render_id not read: %+v", sd)
			}
			// Rendered blocks belong to the session that rendered them.
			b := a.NewSession()
			defer b.Close()
			if _, err := b.Predict(ctx, "shout", "hi"); !errors.Is(err, gradio.ErrUnknownEndpoint) {
				t.Errorf("shout from another session: %v, want ErrUnknownEndpoint", err)
			}
			if n := countAPI(b.Config(), "shout"); n != 0 {
				t.Errorf("the app's config changed: %d shout dependencies", n)
			}
		})
	}
}
