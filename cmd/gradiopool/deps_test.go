package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestServeBinaryLinksNoLab keeps the serve binary the product: the
// benchmark harness (package bench, gonum/plot with its fonts, LaTeX and
// PDF writers) lives in cmd/gradiopool-bench, and the test-only tools
// (toxiproxy, chromedp, miniredis, zerolog, goleak, puddle) are imported
// only by _test files, so none of them may appear among the packages this
// command links. It asks the go command, which CI has anyway.
func TestServeBinaryLinksNoLab(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not on PATH: cannot list the linked packages")
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed only %d packages: %q", len(deps), deps)
	}
	banned := []string{
		"github.com/gradiopool/gradiopool/bench",
		"gonum.org/",
		"codeberg.org/go-pdf/", "codeberg.org/go-latex/", "codeberg.org/go-fonts/",
		"git.sr.ht/~sbinet/gg", "github.com/ajstarks/svgo", "github.com/golang/freetype",
		"github.com/Shopify/toxiproxy", "github.com/chromedp/", "github.com/alicebob/miniredis",
		"github.com/rs/zerolog", "go.uber.org/goleak", "github.com/jackc/puddle",
		"github.com/gradiopool/gradiopool/internal/redistest",
	}
	sawGateway := false
	for _, d := range deps {
		if d == "github.com/gradiopool/gradiopool/gateway" {
			sawGateway = true
		}
		for _, b := range banned {
			if d == b || strings.HasPrefix(d, b) {
				t.Errorf("the serve binary links %s (banned prefix %s)", d, b)
			}
		}
	}
	if !sawGateway {
		t.Fatalf("gateway is not among the linked packages: the listing is wrong")
	}
}
