package gradio_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// queueBlocker is a proxy in front of an app that answers 404 to the queue
// routes (as a front end that forwards only Gradio's REST shape would) and
// counts what it let through.
func queueBlocker(t *testing.T, target string) (string, *atomic.Int64) {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.Transport = proxyTransport(t)
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/queue/") {
			http.NotFound(w, r)
			return
		}
		if strings.Contains(r.URL.Path, "/call/") {
			calls.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &calls
}

func TestCallFallback(t *testing.T) {
	for _, mode := range []gradiotest.Mode{gradiotest.Gradio5, gradiotest.Gradio6, gradiotest.Gradio4SSEv3, gradiotest.Gradio4SSEv2} {
		t.Run(string(mode), func(t *testing.T) {
			srv := startSim(t, mode, nil, nil)
			front, calls := queueBlocker(t, srv.URL)
			c := connect(t, front)
			defer c.Close()
			ctx := testCtx(t)
			out, err := c.Predict(ctx, "upper", "via call")
			if err != nil || str(t, out[0]) != "VIA CALL" {
				t.Fatalf("upper: %s %v", out, err)
			}
			j, err := c.Submit(ctx, "count", 3)
			if err != nil {
				t.Fatal(err)
			}
			evs := collect(t, j)
			if got := strings.Join(outputs(t, evs), "|"); got != "0|0 1|0 1 2" {
				t.Errorf("partial outputs %q", got)
			}
			if last := evs[len(evs)-1]; last.Kind != gradio.EventCompleted || str(t, last.Data[0]) != "0 1 2" {
				t.Errorf("last event %v %s", last.Kind, last.Data)
			}
			_, err = c.Predict(ctx, "fail", "boom")
			var ae *gradio.AppError
			if !errors.As(err, &ae) {
				t.Fatalf("fail: %v, want *AppError", err)
			}
			// gr.State: Gradio 6 keys /call state on the session hash.
			c.Predict(ctx, "counter", "a")
			out, err = c.Predict(ctx, "counter", "b")
			want := "1 items: b"
			if mode == gradiotest.Gradio6 {
				want = "2 items: a, b"
			}
			if err != nil || str(t, out[0]) != want {
				t.Errorf("counter: %s %v, want %q", out, err, want)
			}
			if calls.Load() == 0 {
				t.Error("no /call request went through")
			}
		})
	}
}

func TestCallTransportNeedsCallRoutes(t *testing.T) {
	srv := startSim(t, gradiotest.Gradio4SSEv1, nil, nil)
	c := connect(t, srv.URL, gradio.WithCallTransport())
	defer c.Close()
	_, err := c.Predict(testCtx(t), "upper", "x")
	var ae *gradio.ArgumentError
	if !errors.As(err, &ae) || !strings.Contains(ae.Msg, "4.20") {
		t.Fatalf("err %v, want an *ArgumentError naming Gradio 4.20", err)
	}
}
