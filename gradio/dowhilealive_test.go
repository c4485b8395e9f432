package gradio_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// TestDoWhileAlive: a request the app answers later than the header
// time-out is awaited while the app shows life (a message on one of its
// streams), and cut a header time-out after its last sign of life.
func TestDoWhileAlive(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio5, nil, nil)
	c := connect(t, srv.URL, gradio.WithHeaderTimeout(300*time.Millisecond))
	late := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/never" {
			<-r.Context().Done()
			return
		}
		select { // four header time-outs late: a replica short of threads
		case <-time.After(1200 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte("late"))
	}))
	t.Cleanup(late.Close)
	send := func(path string) (*http.Response, error) {
		req, err := c.NewRequest(testCtx(t), http.MethodGet, late.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.DoWhileAlive(req)
	}

	t.Run("alive", func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		go func() { // the app's other calls stream
			tick := time.NewTicker(30 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					c.NoteStreamMessage()
				}
			}
		}()
		resp, err := send("/late")
		if err != nil {
			t.Fatalf("a late answer from an app that streams was cut: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("silent", func(t *testing.T) {
		resp, err := send("/never")
		if err == nil {
			resp.Body.Close()
			t.Fatal("a request to an app that shows no life was never cut")
		}
		if !strings.Contains(err.Error(), "no message on the app's streams") {
			t.Fatalf("error %v, want the header time-out's", err)
		}
	})
}
