package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
)

// TestNoStateCrossesCallersThroughGateway: the isolation rule on every door
// of the gateway. One replica with one session forces every call onto the
// same pooled session; the simulator's counter keeps a gr.State list per
// session hash, so any reuse of a hash would show another caller's items.
func TestNoStateCrossesCallersThroughGateway(t *testing.T) {
	srv, _, _, _ := frontGateway(t, 1, func(c *gateway.Config) { c.Pool.MaxConnections = 1 })
	callers := []struct{ user, item string }{
		{"alice@example.com", "alice-secret"},
		{"dave@example.com", "dave-item"},
		{"", "anon-1"},
		{"", "anon-2"},
	}
	t.Run("v1", func(t *testing.T) {
		for _, c := range callers {
			a := do(t, "POST", srv.URL+"/v1/predict/counter", `{"data":["`+c.item+`"]}`, gateway.UserHeader, c.user)
			if a.status != 200 || !strings.Contains(a.body, `"1 items: `+c.item+`"`) {
				t.Errorf("%q: %d %s", c.user, a.status, a.body)
			}
		}
	})
	t.Run("gradio_api_call", func(t *testing.T) {
		for _, c := range callers {
			a := do(t, "POST", srv.URL+"/gradio_api/call/counter", `{"data":["`+c.item+`"]}`, gateway.UserHeader, c.user)
			var id struct {
				EventID string `json:"event_id"`
			}
			if a.status != 200 || json.Unmarshal([]byte(a.body), &id) != nil || id.EventID == "" {
				t.Fatalf("%d %s", a.status, a.body)
			}
			req, _ := http.NewRequest("GET", srv.URL+"/gradio_api/call/counter/"+id.EventID, nil)
			req.Header.Set(gateway.UserHeader, c.user)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if !strings.Contains(string(body), "event: complete") || !strings.Contains(string(body), `"1 items: `+c.item+`"`) {
				t.Errorf("%q: %s", c.user, body)
			}
		}
	})
	t.Run("front door", func(t *testing.T) {
		// Each official-client session is its own caller: two calls on one
		// keep their state, a second session starts empty.
		ctx := context.Background()
		for _, c := range callers {
			cl, err := gradio.Connect(ctx, srv.URL, gradio.WithHeader(gateway.UserHeader, c.user))
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []string{"1 items: " + c.item, "2 items: " + c.item + ", " + c.item} {
				out, err := cl.Predict(ctx, "counter", c.item)
				if err != nil {
					t.Fatal(err)
				}
				var got string
				_ = json.Unmarshal(out[0], &got)
				if got != want {
					t.Errorf("%q call %d: %q, want %q", c.user, i+1, got, want)
				}
			}
			_ = cl.Close()
		}
	})
}
