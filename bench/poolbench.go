package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// goBench is one parsed line of `go test -bench` output.
type goBench struct {
	Name        string // without the "Benchmark" prefix and the -GOMAXPROCS suffix
	N           int
	NsPerOp     float64
	BytesPerOp  float64 // -1 when not reported
	AllocsPerOp float64 // -1 when not reported
}

var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+(\d+)\s+([\d.]+) ns/op(.*)$`)

// parseGoBench parses the benchmark lines of `go test -bench` output.
func parseGoBench(out string) []goBench {
	var res []goBench
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		b := goBench{Name: m[1], BytesPerOp: -1, AllocsPerOp: -1}
		b.N, _ = strconv.Atoi(m[2])
		b.NsPerOp, _ = strconv.ParseFloat(m[3], 64)
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "B/op":
				b.BytesPerOp = v
			case "allocs/op":
				b.AllocsPerOp = v
			}
		}
		res = append(res, b)
	}
	return res
}

func runPoolBench(ctx context.Context, e *env, s *Section) error {
	s.Method = "`go test -run '^$' -bench BenchmarkAcquireRelease -benchmem ./pool/sessionpool/`, run by the harness and parsed; " +
		"the benchmark lives in the pool's own package and compares one acquire + release of an already connected session in our " +
		"`sessionpool` with the same operation in `jackc/puddle/v2`. Cases: `1` = one goroutine; `50` = 50 goroutines sharing a " +
		"pool of 50 (never waiting); `500on50` = 500 goroutines on a pool of 50 (most acquires wait)."
	if e.modDir == "" {
		return errNoSource
	}
	if _, err := os.Stat(filepath.Join(e.modDir, "pool", "sessionpool")); err != nil {
		return fmt.Errorf("package pool/sessionpool is not there yet")
	}
	benchtime := e.pickDurString("1s", "20000x")
	args := []string{"test", "-run", "^$", "-bench", "BenchmarkAcquireRelease", "-benchmem", "-benchtime", benchtime, "-count", strconv.Itoa(e.pickInt(3, 1)), "./pool/sessionpool/"}
	e.logf("  go %s", strings.Join(args, " "))
	ctx, cancel := context.WithTimeout(ctx, e.pick(5*time.Minute, 2*time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = e.modDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go test -bench failed: %v: %s", err, lastLines(string(out), 5))
	}
	res := parseGoBench(string(out))
	if len(res) == 0 {
		return fmt.Errorf("go test -bench printed no BenchmarkAcquireRelease results (is the benchmark there yet?)")
	}
	// With -count > 1 keep the median of each case.
	byName := map[string][]goBench{}
	var order []string
	for _, b := range res {
		if _, ok := byName[b.Name]; !ok {
			order = append(order, b.Name)
		}
		byName[b.Name] = append(byName[b.Name], b)
	}
	med := map[string]goBench{}
	for name, bs := range byName {
		sortBy(bs, func(b goBench) float64 { return b.NsPerOp })
		med[name] = bs[len(bs)/2]
	}
	t := Table{Header: []string{"case", "gradiopool ns/op", "puddle ns/op", "ratio (ours / puddle)", "gradiopool B/op, allocs/op", "puddle B/op, allocs/op"}}
	var groups []string
	var ours, theirs []float64
	seen := map[string]bool{}
	for _, name := range order {
		impl, cs, ok := strings.Cut(strings.TrimPrefix(name, "AcquireRelease/"), "/")
		if !ok || seen[cs] {
			continue
		}
		_ = impl
		seen[cs] = true
		g, gok := med["AcquireRelease/gradiopool/"+cs]
		p, pok := med["AcquireRelease/puddle/"+cs]
		row := []string{cs, "–", "–", "–", "–", "–"}
		if gok {
			row[1] = fmt.Sprintf("%.0f", g.NsPerOp)
			row[4] = fmt.Sprintf("%s, %s", num(g.BytesPerOp), num(g.AllocsPerOp))
		}
		if pok {
			row[2] = fmt.Sprintf("%.0f", p.NsPerOp)
			row[5] = fmt.Sprintf("%s, %s", num(p.BytesPerOp), num(p.AllocsPerOp))
		}
		if gok && pok && p.NsPerOp > 0 {
			row[3] = fmt.Sprintf("%.2f", g.NsPerOp/p.NsPerOp)
			groups = append(groups, cs)
			ours = append(ours, g.NsPerOp)
			theirs = append(theirs, p.NsPerOp)
		}
		t.Rows = append(t.Rows, row)
	}
	s.Tables = append(s.Tables, t)
	if e.opts.Quick {
		s.note("quick mode: -benchtime %s -count 1 (too short for stable numbers)", benchtime)
	} else {
		s.note("-benchtime %s, median of -count 3", benchtime)
	}
	s.note("GOMAXPROCS is the machine's (%d); with 2 cores, the contended cases mostly measure scheduler hand-offs.", e.numCPU())
	if len(groups) > 0 {
		var hs []string
		for i, g := range groups {
			hs = append(hs, fmt.Sprintf("%s: %.0f vs %.0f ns", g, ours[i], theirs[i]))
		}
		s.highlight("Acquire + release, sessionpool vs jackc/puddle/v2: %s.", strings.Join(hs, "; "))
		e.addChart(s, "poolbench.png", "acquire+release ns/op, sessionpool vs puddle", func(dir, file string) error {
			return barChart(dir, file, "Acquire + Release (lower is better)", "ns/op", groups,
				[]series{{"gradiopool sessionpool", ours}, {"jackc/puddle/v2", theirs}})
		})
	}
	return nil
}

func num(v float64) string {
	if v < 0 {
		return "?"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
