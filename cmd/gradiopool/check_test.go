package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// deadURL is an address on 127.0.0.1 where nothing listens any more.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestServeCheck(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := gradiotest.NewServer(gradiotest.DefaultApp())
	defer a.Close()
	b := gradiotest.NewServer(gradiotest.DefaultApp())
	defer b.Close()
	dead := deadURL(t)

	t.Run("all reachable", func(t *testing.T) {
		var out, errw strings.Builder
		err := run(context.Background(), []string{"serve", "--check", "--replicas", a.URL + "," + b.URL}, &out, &errw)
		if err != nil {
			t.Fatalf("check failed: %v\n%s%s", err, out.String(), errw.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "REPLICA") || !strings.Contains(lines[0], "ERROR") {
			t.Fatalf("want a header, two rows and a summary:\n%s", out.String())
		}
		for i, u := range []string{a.URL, b.URL} {
			row := strings.Fields(lines[i+1])
			// replica, protocol, Gradio version, endpoints, connect time, error "-"
			if len(row) != 6 || row[0] != u || row[1] != "sse_v3" || row[2] == "-" || row[3] == "0" || row[3] == "-" || row[5] != "-" {
				t.Errorf("row %d = %q", i, row)
			}
		}
		if !strings.Contains(lines[3], "2 replicas reachable") {
			t.Errorf("summary %q", lines[3])
		}
	})

	t.Run("one unreachable", func(t *testing.T) {
		var out, errw strings.Builder
		err := run(context.Background(), []string{"serve", "--check", "--replicas", a.URL + "," + dead + "," + b.URL}, &out, &errw)
		if err == nil || !strings.Contains(err.Error(), "1 of 3 replicas failed") || errors.Is(err, errUsage) {
			t.Fatalf("err = %v, want 1 of 3 replicas failed (exit 1)", err)
		}
		var deadRow string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, dead+" ") {
				deadRow = l
			}
		}
		if !strings.Contains(deadRow, "connection refused") {
			t.Errorf("the unreachable replica's row names no error: %q\n%s", deadRow, out.String())
		}
		if strings.Count(out.String(), "sse_v3") != 2 {
			t.Errorf("the two live replicas should still be described:\n%s", out.String())
		}
	})

	t.Run("invalid configuration", func(t *testing.T) {
		err := run(context.Background(), []string{"serve", "--check", "--replicas", ""}, &strings.Builder{}, &strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), "replica") {
			t.Fatalf("err = %v, want a configuration error (no replicas)", err)
		}
	})
}

// TestServeCheckStartChecks: `serve --check` fails on what `serve` would
// refuse to start on, beyond the configuration's syntax: a misspelt
// variable, an unreachable Redis, an OTLP protocol that is not built in,
// a listen address that cannot be used, an upload directory that cannot
// be made; and it passes a listen address in use (a gateway already
// running there) with a warning.
func TestServeCheckStartChecks(t *testing.T) {
	a := gradiotest.NewServer(gradiotest.DefaultApp())
	defer a.Close()
	check := func(t *testing.T, args ...string) (string, string, error) {
		t.Helper()
		var out, errw strings.Builder
		err := run(context.Background(), append([]string{"serve", "--check", "--replicas", a.URL, "--listen", "127.0.0.1:0"}, args...), &out, &errw)
		return out.String(), errw.String(), err
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"misspelt variable", map[string]string{"GRADIOPOOL_POOL_MAX_CONECTIONS": "7"}, nil, "did you mean GRADIOPOOL_POOL_MAX_CONNECTIONS?"},
		{"redis unreachable", map[string]string{"GRADIOPOOL_REDIS_URL": "redis://" + strings.TrimPrefix(deadURL(t), "http://") + "/0", "GRADIOPOOL_HASH_KEY": "k"}, nil, "redis unreachable"},
		{"grpc tracing", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, nil, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
		{"listen address not local", nil, []string{"--listen", "192.0.2.1:8080"}, "listen: 192.0.2.1:8080"},
		{"upload directory", nil, []string{"--frontdoor-upload-dir", "/nonexistent-gradiopool/uploads"}, "frontdoor.upload_dir: /nonexistent-gradiopool/uploads does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			out, errw, err := check(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to name %q\n%s%s", err, tc.want, out, errw)
			}
			if errors.Is(err, errUsage) {
				t.Errorf("exit 2 (usage) for a failed check: %v", err)
			}
		})
	}

	t.Run("listen address in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		out, errw, err := check(t, "--listen", ln.Addr().String())
		if err != nil || !strings.Contains(errw, "warning: listen: "+ln.Addr().String()+" is in use") {
			t.Fatalf("err = %v, want a pass with a warning on stderr\n%s%s", err, out, errw)
		}
	})
}
