package gradio_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// TestStalledConfigBodyEnds: a replica that answers /config with headers
// and then trickles its body one byte at a time must not hold the connect
// (the pool's connect runs under its lifetime context, so nothing else
// would end it). The body has to arrive within the header time-out.
func TestStalledConfigBodyEnds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		// About 3 s of trickle at most: long enough that a reader without
		// a body deadline gets a whole (unusable) body, not a time-out.
		for range 150 {
			if _, err := w.Write([]byte(" ")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	defer srv.Close()
	_, err := gradio.Connect(context.Background(), srv.URL, gradio.WithHeaderTimeout(200*time.Millisecond))
	if !errors.Is(err, gradio.ErrBodyTimeout) {
		t.Fatalf("Connect = %v, want ErrBodyTimeout", err)
	}
	var ce *gradio.ConnectError
	if !errors.As(err, &ce) {
		t.Errorf("Connect = %T, want a *ConnectError (a transient failure, retried later)", err)
	}
	srv.CloseClientConnections()
}
