package reliability_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

var fuzzFuncRe = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)

// fuzzSection lists the repository's fuzz targets and the size of their
// committed corpora (testdata/fuzz/<Target>); seeds added in code with
// f.Add are not counted.
func fuzzSection() string {
	type target struct{ pkg, name string }
	var targets []target
	_ = filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, m := range fuzzFuncRe.FindAllSubmatch(b, -1) {
			targets = append(targets, target{filepath.Dir(strings.TrimPrefix(p, "../")), string(m[1])})
		}
		return nil
	})
	sort.Slice(targets, func(i, j int) bool {
		return targets[i].pkg+targets[i].name < targets[j].pkg+targets[j].name
	})
	var b strings.Builder
	b.WriteString("## Fuzz targets\n\nEvery parser of outside input has a target; CI runs each one's seeds with `go test`, and `make fuzz` runs each for a short while. Corpus: files committed under `testdata/fuzz/<target>`, besides the seeds in code.\n\n| package | target | committed corpus |\n|---|---|--:|\n")
	for _, t := range targets {
		n := 0
		if es, err := os.ReadDir(filepath.Join("..", t.pkg, "testdata", "fuzz", t.name)); err == nil {
			n = len(es)
		}
		fmt.Fprintf(&b, "| %s | %s | %d |\n", t.pkg, t.name, n)
	}
	b.WriteString("\n")
	return b.String()
}
