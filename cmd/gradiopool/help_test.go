package main

import (
	"context"
	"strings"
	"testing"
)

// TestEveryCommandHasHelp: `gradiopool CMD -h` prints written help (a usage
// line and a description before the flags), not the flag package's bare
// "Usage of CMD:".
func TestEveryCommandHasHelp(t *testing.T) {
	if len(order) != len(commands) {
		t.Fatalf("order lists %d commands, the table has %d", len(order), len(commands))
	}
	for _, name := range order {
		var out, errw strings.Builder
		if err := run(context.Background(), []string{name, "-h"}, &out, &errw); err != nil {
			t.Errorf("%s -h: %v", name, err)
			continue
		}
		help := out.String() + errw.String()
		if strings.Contains(help, "Usage of") || !strings.HasPrefix(help, "usage: gradiopool "+name) {
			t.Errorf("%s -h does not start with a written usage line:\n%s", name, help)
		}
		if lines := strings.Count(strings.TrimSpace(help), "\n") + 1; lines < 4 {
			t.Errorf("%s -h has %d lines: no description:\n%s", name, lines, help)
		}
	}
}
