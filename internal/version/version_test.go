package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	info := Get()
	if info.GoVersion != runtime.Version() {
		t.Errorf("GoVersion = %q, want %q", info.GoVersion, runtime.Version())
	}
	if info.Version == "" {
		t.Error("Version is empty, want a version or (devel)")
	}
	s := info.String()
	if !strings.HasPrefix(s, "gradiopool "+info.Version) || !strings.HasSuffix(s, info.GoVersion) {
		t.Errorf("String() = %q", s)
	}
}

func TestStampedWins(t *testing.T) {
	old := stamped
	t.Cleanup(func() { stamped = old })
	stamped = "v1.2.3"
	if got := Get().Version; got != "v1.2.3" {
		t.Errorf("Version = %q with a stamped version, want v1.2.3", got)
	}
}
