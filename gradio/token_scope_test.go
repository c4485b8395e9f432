package gradio_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// Security (issue 16): output file URLs that point elsewhere never get the
// HF token, the extra headers or the app's cookies, also not through a
// redirect from the app's own host.
func TestTokenOnlyGoesToTheApp(t *testing.T) {
	var mu sync.Mutex
	var seen []http.Header
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		_, _ = io.WriteString(w, "payload")
	}))
	defer other.Close()
	app := startSim(t, gradiotest.Gradio5, nil, func(s *gradiotest.Server) { s.HFToken = "hf_secret_tok" })
	// A redirect from the app's own host to the other one.
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "file=") {
			http.Redirect(w, r, other.URL+"/redirected", http.StatusFound)
			return
		}
		// Everything else is the app's.
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, app.URL+r.URL.RequestURI(), r.Body)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	defer redirector.Close()
	defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()

	c := connect(t, redirector.URL, gradio.WithHFToken("hf_secret_tok"), gradio.WithHeader("X-Extra-Secret", "xs"))
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	for _, fd := range []gradio.FileData{
		{URL: other.URL + "/stream", IsStream: true},
		{Path: other.URL + "/by-path"},
		{Path: "/tmp/x"}, // file= on the app's host, redirected elsewhere
	} {
		var b strings.Builder
		if err := c.Download(ctx, fd, &b); err != nil || b.String() != "payload" {
			t.Fatalf("download %+v: %q %v", fd, b.String(), err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 {
		t.Fatalf("the other host saw %d requests, want 3", len(seen))
	}
	for i, h := range seen {
		for _, k := range []string{"Authorization", "X-Hf-Authorization", "X-Extra-Secret", "Cookie"} {
			if v := h.Get(k); v != "" {
				t.Errorf("request %d to another host carried %s: %q", i, k, v)
			}
		}
	}
}
