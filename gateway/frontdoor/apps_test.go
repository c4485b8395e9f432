package frontdoor_test

import (
	"context"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/internal/appshape"
)

// TestFrontDoorConfigShapeIgnoresVolatileFields: two replicas of one app
// (each its own app_id and root) have the same fingerprint; another app has
// another.
func TestFrontDoorConfigShapeIgnoresVolatileFields(t *testing.T) {
	other := gradiotest.DefaultApp()
	other.Handle("extra", func(_ context.Context, c *gradiotest.Call) ([]any, error) { return []any{"x"}, nil },
		[]gradiotest.Component{gradiotest.Textbox("in")}, []gradiotest.Component{gradiotest.Textbox("out")})
	var fps []string
	for _, app := range []*gradiotest.App{nil, nil, other} {
		s := gradiotest.NewServer(app)
		t.Cleanup(s.Close)
		c, err := gradio.Connect(context.Background(), s.URL)
		if err != nil {
			t.Fatal(err)
		}
		fps = append(fps, appshape.Fingerprint(c.Config()))
		c.Close()
	}
	if fps[0] != fps[1] {
		t.Errorf("two replicas of the default app: fingerprints %s and %s differ", fps[0], fps[1])
	}
	if fps[2] == fps[0] {
		t.Errorf("an app with one more endpoint has the same fingerprint %s", fps[0])
	}
}
