package version

import (
	"os"
	"regexp"
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
		t.Error("Version is empty, want a version")
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

// TestReleaseIsTheChangelogs: Release is the newest version CHANGELOG.md
// describes, a semantic version, so that `make release` (which takes its
// version from CHANGELOG.md) and an unstamped build agree.
func TestReleaseIsTheChangelogs(t *testing.T) {
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("CHANGELOG.md has no release heading like ## [0.9.0] - 2026-12-04")
	}
	if got := "v" + string(m[1]); got != Release {
		t.Errorf("CHANGELOG.md's newest release is %s, version.Release is %s", got, Release)
	}
	if !semver.MatchString(Release) {
		t.Errorf("Release %q is not a semantic version", Release)
	}
}

// TestUnstampedVersion: a build without a stamp or a module version
// reports the release its source follows.
func TestUnstampedVersion(t *testing.T) {
	old := stamped
	t.Cleanup(func() { stamped = old })
	stamped = ""
	v := Get().Version
	if v != Release+"+devel" && !strings.HasPrefix(v, "v") {
		t.Errorf("Version = %q, want %s+devel or a module version", v, Release)
	}
}

var semver = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
