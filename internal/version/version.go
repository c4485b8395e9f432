// Package version says which build of gradiopool is running: the module
// version, the VCS revision and the Go version, read from the build
// information the Go linker embeds (runtime/debug.ReadBuildInfo), with a
// version stamped by `make build` taking precedence.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// ModulePath is gradiopool's module path, looked up among the build's
// dependencies when gradiopool is linked into another program.
const ModulePath = "github.com/gradiopool/gradiopool"

// stamped and stampedRevision are set by the linker: `make build` and the
// Dockerfile pass -ldflags "-X github.com/gradiopool/gradiopool/internal/version.stamped=$(git describe ...)"
// (and stampedRevision=$(git rev-parse HEAD)). They win over the build
// information, whose module version is "(devel)" or a pseudo-version and
// whose VCS revision is missing where the go command cannot see the
// repository (a container build without .git, a git worktree, -buildvcs=false).
var stamped, stampedRevision string

// Release is the latest version described in CHANGELOG.md (a test keeps
// them equal). A build that was not stamped and whose module version is
// unknown ("(devel)": a clone built with go build or go install ./...)
// reports it as Release+"+devel", so that even such a binary says which
// release its source follows.
const Release = "v0.9.0"

// Info is one build's identity.
type Info struct {
	Version   string // the stamped version, else the module version, else Release+"+devel"
	Revision  string // VCS commit, with "+dirty" when built from modified files; "" if unknown
	Time      string // VCS commit time (RFC 3339); "" if unknown
	GoVersion string // the Go toolchain that built the binary
}

// Get reads the build information once per call (cheap: the linker embeds it).
func Get() Info {
	info := Info{Version: "(devel)", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		info.GoVersion = bi.GoVersion
		if bi.Main.Path == ModulePath {
			if bi.Main.Version != "" {
				info.Version = bi.Main.Version
			}
			dirty := false
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					info.Revision = s.Value
				case "vcs.time":
					info.Time = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if dirty && info.Revision != "" {
				info.Revision += "+dirty"
			}
		} else {
			// Linked into someone else's program: our version is that of
			// the dependency (the main module's VCS data is not ours).
			for _, d := range bi.Deps {
				if d.Path == ModulePath {
					if d.Replace != nil && d.Replace.Version != "" {
						d = d.Replace
					}
					if d.Version != "" {
						info.Version = d.Version
					}
					break
				}
			}
		}
	}
	if info.Version == "(devel)" {
		info.Version = Release + "+devel"
	}
	if stamped != "" {
		info.Version = stamped
	}
	if stampedRevision != "" {
		info.Revision = stampedRevision
	}
	return info
}

// String is the one-line form `gradiopool version` prints.
func (i Info) String() string {
	s := "gradiopool " + i.Version
	if i.Revision != "" {
		s += fmt.Sprintf(" (revision %s", i.Revision)
		if i.Time != "" {
			s += ", " + i.Time
		}
		s += ")"
	}
	return s + " " + i.GoVersion
}
