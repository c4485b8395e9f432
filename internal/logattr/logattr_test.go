package logattr

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestMsWritesMilliseconds(t *testing.T) {
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", Ms("queue_timeout", 30*time.Second), Ms("duration", 1500*time.Microsecond))
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["queue_timeout_ms"] != 30000.0 || m["duration_ms"] != 1.5 {
		t.Fatalf("got %s", buf.Bytes())
	}
	if _, ok := m["queue_timeout"]; ok {
		t.Fatalf("nanosecond key still written: %s", buf.Bytes())
	}
}

// durationAttr matches the slog constructors that write a duration in
// nanoseconds in JSON.
var durationAttr = regexp.MustCompile(`slog\.Duration\(|slog\.DurationValue\(`)

// TestNoNanosecondDurationsInLogs keeps the convention: no non-test Go file
// of the module logs a duration with slog.Duration (nanoseconds in JSON).
func TestNoNanosecondDurationsInLogs(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			if durationAttr.MatchString(line) && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s:%d logs a duration in nanoseconds; use logattr.Ms: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("only %d Go files checked: the walk is not covering the module", checked)
	}
}
