package gradio_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// Regression (issue 16, defect 6): a wrong HF_TOKEN for a private Space
// was reported as "the app requires login". The proxy's refusal and
// Gradio's own login are told apart, and the token is never echoed.
func TestRefusedTokenIsNamed(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	private := startSim(t, gradiotest.Gradio5, nil, func(s *gradiotest.Server) { s.HFToken = "hf_right" })
	for _, tc := range []struct {
		name, url string
		opts      []gradio.Option
		want      string
	}{
		{"wrong token", private.URL, []gradio.Option{gradio.WithHFToken("hf_wrong_secret")}, "token was refused"},
		{"no token", private.URL, nil, "private Space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gradio.Connect(ctx, tc.url, tc.opts...)
			if !errors.Is(err, gradio.ErrUnauthorized) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hf_wrong_secret") {
				t.Fatalf("%v, want ErrUnauthorized saying %q", err, tc.want)
			}
		})
	}
	t.Run("gradio login", func(t *testing.T) {
		login := startSim(t, gradiotest.Gradio5, nil, func(s *gradiotest.Server) { s.Username, s.Password = "u", "pw" })
		_, err := gradio.Connect(ctx, login.URL, gradio.WithHFToken("hf_any"))
		if err == nil || strings.Contains(err.Error(), "token was refused") {
			t.Fatalf("a Gradio login answer blamed on the token: %v", err)
		}
	})
}
