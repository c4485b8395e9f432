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
