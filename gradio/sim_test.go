package gradio_test

import (
	"encoding/json"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

func str(t testing.TB, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("output %s is not a string: %v", raw, err)
	}
	return s
}

func TestPredictAllModes(t *testing.T) {
	for _, mode := range gradiotest.Modes {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, nil)
			c := connect(t, srv.URL+"/")
			ctx := testCtx(t)
			if got := c.Config().Protocol; got != mode.Protocol() {
				t.Errorf("protocol %q, want %q", got, mode.Protocol())
			}
			out, err := c.Predict(ctx, "/upper", "hello gradio")
			if err != nil {
				t.Fatalf("upper: %v", err)
			}
			if len(out) != 1 || str(t, out[0]) != "HELLO GRADIO" {
				t.Fatalf("upper = %s", out)
			}
			out, err = c.Predict(ctx, "count", 3)
			if err != nil {
				t.Fatalf("count: %v", err)
			}
			if got := str(t, out[0]); got != "0 1 2" {
				t.Fatalf("count = %q", got)
			}
			for i, want := range []string{"1 items: apple", "2 items: apple, banana"} {
				out, err = c.Predict(ctx, "/counter", []string{"apple", "banana"}[i])
				if err != nil {
					t.Fatalf("counter: %v", err)
				}
				if len(out) != 1 || str(t, out[0]) != want {
					t.Fatalf("counter = %s, want %q", out, want)
				}
			}
			_, err = c.Predict(ctx, "/fail", "boom")
			var ae *gradio.AppError
			if !asErr(err, &ae) {
				t.Fatalf("fail: %v (%T), want *AppError", err, err)
			}
			t.Logf("fail: %v", err)
		})
	}
}
