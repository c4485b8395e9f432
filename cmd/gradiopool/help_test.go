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

// TestServeHelpGrouped: `serve -h` lists the essential flags first, then
// every other flag once, under the heading of its section.
func TestServeHelpGrouped(t *testing.T) {
	var out, errw strings.Builder
	if err := run(context.Background(), []string{"serve", "-h"}, &out, &errw); err != nil {
		t.Fatal(err)
	}
	help := errw.String()
	ess := strings.Index(help, "\nEssential flags:\n")
	pool := strings.Index(help, "\nPool: ")
	if ess < 0 || pool < ess {
		t.Fatalf("no essential flags before the pool's:\n%s", help)
	}
	for _, f := range essentialFlags {
		if i := strings.Index(help, "\n  --"+f+" "); i < ess || i > pool {
			if j := strings.Index(help, "\n  --"+f+"\n"); j < ess || j > pool {
				t.Errorf("--%s is not among the essential flags", f)
			}
		}
	}
	for _, title := range []string{"Gradio front door (frontdoor.*)", "Several gateways through Redis (cluster.*)", "Logs (log.*)"} {
		if !strings.Contains(help, "\n"+title+":\n") {
			t.Errorf("no section %q", title)
		}
	}
	if strings.Contains(help, "\nOther flags:") {
		t.Errorf("flags outside every section:\n%s", help[strings.Index(help, "\nOther flags:"):])
	}
	for _, name := range []string{"frontdoor-max-sessions", "cluster-lease-ttl", "log-format", "max-body-bytes", "idle-timeout"} {
		if n := strings.Count(help, "\n  --"+name+" "); n != 1 {
			t.Errorf("--%s listed %d times", name, n)
		}
	}
	if !strings.Contains(help, "[key pool.max_connections, env GRADIOPOOL_POOL_MAX_CONNECTIONS]") {
		t.Error("a flag's help does not name its key and variable")
	}
}
