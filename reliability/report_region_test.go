package reliability_test

import "testing"

// TestKeptRegion: the region another suite writes into docs/RELIABILITY.md
// survives a new report verbatim; an unclosed or missing one is dropped.
func TestKeptRegion(t *testing.T) {
	region := "<!-- abuse:begin -->\n## Abuse\n\n| a | b |\n<!-- abuse:end -->"
	for _, tc := range []struct{ old, want string }{
		{"# Reliability report\n\n" + region + "\n\n## Not covered\n", region + "\n\n"},
		{region, region + "\n\n"},
		{"# Reliability report\n", ""},
		{"<!-- abuse:begin -->\nno end", ""},
		{"<!-- abuse:end --> then <!-- abuse:begin -->", ""},
	} {
		if got := keptRegion(tc.old); got != tc.want {
			t.Errorf("keptRegion(%q) = %q, want %q", tc.old, got, tc.want)
		}
	}
	unit := unitBegin + "\n## Unit tests\n" + unitEnd
	if got := markedRegion(region+"\n\n"+unit+"\n\n## Not covered\n", unitBegin, unitEnd); got != unit+"\n\n" {
		t.Errorf("the unit region: %q", got)
	}
}
