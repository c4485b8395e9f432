package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// link is a Markdown link or image target: [text](target).
var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// inlineCode is a code span; links inside one are text.
var inlineCode = regexp.MustCompile("`[^`]*`")

// TestLinks: every relative link of README.md, CHANGELOG.md and docs/*.md
// names a file or directory of the repository, and every #anchor a
// heading of its Markdown file, as GitHub makes their ids.
func TestLinks(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"), filepath.Join("..", "CHANGELOG.md"))
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		anchors[path] = headingIDs(string(b))
		return anchors[path]
	}
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for n, target := range links(string(b)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: %s: no such file", file, n, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s:%d: %s: an anchor into a file that is not Markdown", file, n, target)
				continue
			}
			if !anchorsOf(dest)[anchor] {
				t.Errorf("%s:%d: %s: %s has no heading with the id %q", file, n, target, dest, anchor)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d links: the parser missed some", checked)
	}
}

// links returns the link targets of a Markdown text outside code blocks
// and code spans, by line number.
func links(text string) map[int]string {
	out := map[int]string{}
	inBlock := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			continue
		}
		line = inlineCode.ReplaceAllString(line, "")
		for j, m := range link.FindAllStringSubmatch(line, -1) {
			// One key per link: line numbers stay readable for the
			// usual one link per line, and several per line are kept.
			out[(i+1)+j*1000000] = m[1]
		}
	}
	return out
}

// headingIDs are the ids GitHub gives a file's headings: lower case,
// punctuation dropped except - and _, spaces as -, and -1, -2, ... for
// repeats; plus ids of explicit <a id="..."> or <a name="..."> anchors.
func headingIDs(text string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	inBlock := false
	explicit := regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			continue
		}
		for _, m := range explicit.FindAllStringSubmatch(line, -1) {
			ids[m[1]] = true
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		id := slug(title)
		if k := seen[id]; k > 0 {
			ids[fmt.Sprintf("%s-%d", id, k)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

// slug is GitHub's heading id: the text without Markdown link targets,
// lower-cased; letters, digits, -, _ and spaces kept; spaces as -.
func slug(title string) string {
	title = regexp.MustCompile(`\]\([^)]*\)`).ReplaceAllString(title, "]")
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// TestSlug pins the rule on headings of this repository's kind.
func TestSlug(t *testing.T) {
	for title, want := range map[string]string{
		"Reload: SIGHUP or `POST /api/admin/reload`":      "reload-sighup-or-post-apiadminreload",
		"Metrics (`GET /metrics`)":                        "metrics-get-metrics",
		"A replica is ejected":                            "a-replica-is-ejected",
		"429 and 503 answers":                             "429-and-503-answers",
		"The simulated Gradio app (`gradio/gradiotest`)":  "the-simulated-gradio-app-gradiogradiotest",
		"[Keep a Changelog](https://keepachangelog.com/)": "keep-a-changelog",
		"0.9.0 - 2026-12-04":                              "090---2026-12-04",
	} {
		if got := slug(title); got != want {
			t.Errorf("slug(%q) = %q, want %q", title, got, want)
		}
	}
}
