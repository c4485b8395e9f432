package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestHealth(t *testing.T) {
	for listen, want := range map[string]string{
		"":             "http://127.0.0.1:8080/healthz",
		"0.0.0.0:9000": "http://127.0.0.1:9000/healthz",
		"[::]:9000":    "http://127.0.0.1:9000/healthz",
		"10.0.0.5:80":  "http://10.0.0.5:80/healthz",
	} {
		if got := healthURL(listen); got != want {
			t.Errorf("healthURL(%q) = %q, want %q", listen, got, want)
		}
	}
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer srv.Close()
	var out strings.Builder
	if err := run(context.Background(), []string{"health", "--url", srv.URL + "/healthz"}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "ok") {
		t.Fatalf("healthy gateway: %v %q", err, out.String())
	}
	status.Store(http.StatusServiceUnavailable)
	if err := run(context.Background(), []string{"health", "--url", srv.URL + "/healthz"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("unhealthy gateway: %v, want an error naming 503", err)
	}
	srv.Close()
	if err := run(context.Background(), []string{"health", "--url", srv.URL + "/healthz"}, io.Discard, io.Discard); err == nil {
		t.Fatal("no gateway: want an error")
	}
}
