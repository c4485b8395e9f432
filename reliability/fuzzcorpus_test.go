package reliability_test

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
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
	cache := goEnv("GOCACHE")
	var b strings.Builder
	b.WriteString("## Fuzz targets\n\nEvery parser of outside input has a target. `go test` (CI) runs each one's seeds; `make fuzz` (CI too) fuzzes each for 5 s, `make fuzz FUZZTIME=1m` longer. Seeds: inputs in code (from the recorded transcripts and fixtures where there are some) and under `testdata/fuzz`; corpus: the inputs the fuzzer kept on this machine (Go's fuzz cache) after the runs so far.\n\n| package | target | seeds | corpus |\n|---|---|--:|--:|\n")
	for _, t := range targets {
		seeds := countSeeds(t.pkg, t.name)
		corpus := 0
		if cache != "" {
			if es, err := os.ReadDir(filepath.Join(cache, "fuzz", "github.com/gradiopool/gradiopool", t.pkg, t.name)); err == nil {
				corpus = len(es)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d |\n", t.pkg, t.name, seeds, corpus)
	}
	b.WriteString("\n")
	return b.String()
}

func goEnv(key string) string {
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// countSeeds runs a target's seeds and counts them.
func countSeeds(pkg, name string) string {
	out, err := exec.Command("go", "test", "-count=1", "-run", "^"+name+"$", "-v", "../"+pkg+"/").CombinedOutput()
	if err != nil {
		return "?"
	}
	return fmt.Sprint(strings.Count(string(out), "=== RUN   "+name+"/"))
}
