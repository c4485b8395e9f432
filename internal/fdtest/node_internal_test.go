package fdtest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestModuleRootFindsTestdata: from a package's directory (a test's
// working directory) moduleRoot finds the repository, whose
// testdata/jsclient the JS client helpers run in, at any depth.
func TestModuleRootFindsTestdata(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Abs(filepath.Join("..", ".."))
	if root != want {
		t.Errorf("moduleRoot() = %s, want %s", root, want)
	}
	if _, err := os.Stat(filepath.Join(root, "testdata", "jsclient", "package.json")); err != nil {
		t.Errorf("no testdata/jsclient at the root found: %v", err)
	}
}
