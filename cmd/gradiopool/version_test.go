package main

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var out, errw strings.Builder
		if err := run(context.Background(), args, &out, &errw); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		got := out.String()
		if !strings.HasPrefix(got, "gradiopool ") || !strings.Contains(got, runtime.Version()) {
			t.Errorf("%v printed %q, want gradiopool VERSION ... %s", args, got, runtime.Version())
		}
	}
	if err := run(context.Background(), []string{"version", "extra"}, io.Discard, io.Discard); !errors.Is(err, errUsage) {
		t.Errorf("version extra: %v, want a usage error", err)
	}
}
