package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

func TestCallCommand(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := gradiotest.NewUnstartedServer(nil)
	srv.StepDelay = time.Millisecond
	srv.TimeScale = 0.01
	srv.Start()
	defer srv.Close()
	hub := gradiotest.NewHub()
	defer hub.Close()
	hub.AddSpace("sim/app", srv)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte("hello file payload\n"), 0o600)
	t.Chdir(dir)

	tests := []struct {
		name    string
		args    []string
		want    string // exact stdout, or prefix with "~"
		wantErr string
	}{
		{"upper", []string{srv.URL, "upper", `["hello"]`}, "[\"HELLO\"]\n", ""},
		{"upper plain string", []string{srv.URL + "/", "/upper", "plain text"}, "[\"PLAIN TEXT\"]\n", ""},
		{"space id", []string{"sim/app", "upper", `["x"]`, "--hub", hub.URL}, "[\"X\"]\n", ""},
		{"count default", []string{srv.URL, "count"}, "[\"0 1 2 3 4\"]\n", ""},
		{"count kwargs", []string{srv.URL, "count", `{"n": 2}`}, "[\"0 1\"]\n", ""},
		{"slow", []string{srv.URL, "slow", `[1]`}, "[\"slept 1.00s\"]\n", ""},
		{"counter", []string{srv.URL, "counter", `["a"]`}, "[\"1 items: a\"]\n", ""},
		{"fail", []string{srv.URL, "fail", `["boom"]`}, "", "deliberate failure for input 'boom'"},
		{"file object", []string{srv.URL, "reverse_file", `[{"path": "./in.txt"}]`}, "~[{\"path\":", ""},
		{"file at", []string{"--download", filepath.Join(dir, "out"), srv.URL, "reverse_file", `["@in.txt"]`}, "~[\"" + filepath.Join(dir, "out"), ""},
		{"unknown endpoint", []string{srv.URL, "nope"}, "", "unknown endpoint"},
		{"usage", []string{srv.URL}, "", "usage"},
		{"stream", []string{srv.URL, "count", "[2]", "--stream"}, "~{\"kind\":\"queued\"", ""},
		{"list", []string{srv.URL, "--list"}, "~/upper(text: str) -> [str]  fn_index 0\n/count(n: float = 5) -> [str]  fn_index 1  generator\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := runCall(ctx, tt.args, &stdout, &stderr)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("err %v (stderr %s)", err, stderr.String())
			}
			got := stdout.String()
			if p, ok := strings.CutPrefix(tt.want, "~"); ok {
				if !strings.HasPrefix(got, p) {
					t.Fatalf("stdout %q, want prefix %q", got, p)
				}
			} else if got != tt.want {
				t.Fatalf("stdout %q, want %q", got, tt.want)
			}
		})
	}

	t.Run("stream lines", func(t *testing.T) {
		var stdout bytes.Buffer
		if err := runCall(context.Background(), []string{"--stream", srv.URL, "count", "[3]"}, &stdout, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		var kinds []string
		var last map[string]any
		for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			kinds = append(kinds, m["kind"].(string))
			last = m
		}
		if last["kind"] != "completed" || last["data"].([]any)[0] != "0 1 2" {
			t.Fatalf("last line %v (kinds %v)", last, kinds)
		}
		if n := strings.Count(strings.Join(kinds, " "), "output"); n != 3 {
			t.Fatalf("kinds %v", kinds)
		}
	})

	t.Run("download content", func(t *testing.T) {
		var stdout bytes.Buffer
		out := filepath.Join(dir, "dl")
		if err := runCall(context.Background(), []string{srv.URL, "reverse_file", `[{"path":"in.txt"}]`, "--download", out}, &stdout, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		var paths []string
		if err := json.Unmarshal(stdout.Bytes(), &paths); err != nil || len(paths) != 1 {
			t.Fatalf("stdout %q", stdout.String())
		}
		b, _ := os.ReadFile(paths[0])
		if string(b) != "\ndaolyap elif olleh" {
			t.Fatalf("content %q", b)
		}
	})

	t.Run("token from env only", func(t *testing.T) {
		hub.SetPrivate("sim/app", "hf_cli_secret")
		t.Setenv("MY_TOKEN", "hf_cli_secret")
		var stdout bytes.Buffer
		err := runCall(context.Background(), []string{"sim/app", "upper", `["t"]`, "--hub", hub.URL}, &stdout, &bytes.Buffer{})
		if err == nil {
			t.Fatal("private Space without token worked")
		}
		if err := runCall(context.Background(), []string{"sim/app", "upper", `["t"]`, "--hub", hub.URL, "--token-env", "MY_TOKEN"}, &stdout, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, err) || strings.Contains(stdout.String(), "hf_cli_secret") {
			t.Fatal("token printed")
		}
	})
}
