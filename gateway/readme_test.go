package gateway_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
)

// The configuration reference's table (docs/configuration.md) is generated
// from gateway.Settings, so the defaults it shows are the constants the code
// uses. Run with GRADIOPOOL_UPDATE_README=1 to rewrite it after adding a
// key (the variable and the test's name keep their README wording, so that
// `GRADIOPOOL_UPDATE_README=1 go test ./gateway -run README` still
// regenerates it).
const (
	tableStart = "<!-- config-table: generated from gateway.Settings by TestREADMEConfigTable -->\n"
	tableEnd   = "<!-- /config-table -->"
)

func configTable() string {
	var b strings.Builder
	b.WriteString("| key | environment | flag | unit | default | meaning |\n|---|---|---|---|---|---|\n")
	for _, s := range gateway.Settings() {
		def := s.Default
		switch {
		case s.Key == "replicas":
			def = "required"
		case def == "":
			def = "none"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", s.Key, code(s.Env), code(s.Flag), s.Unit, def, s.Usage)
	}
	return b.String()
}

// code writes s as code, or "none".
func code(s string) string {
	if s == "" {
		return "none"
	}
	return "`" + s + "`"
}

func TestREADMEConfigTable(t *testing.T) {
	const path = "../docs/configuration.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i := strings.Index(readme, tableStart)
	j := strings.Index(readme, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q ... %q", path, strings.TrimSpace(tableStart), tableEnd)
	}
	want := configTable()
	if got := readme[i+len(tableStart) : j]; got != want {
		if os.Getenv("GRADIOPOOL_UPDATE_README") == "1" {
			if err := os.WriteFile(path, []byte(readme[:i+len(tableStart)]+want+readme[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s's configuration table is out of date (rerun with GRADIOPOOL_UPDATE_README=1); want:\n%s", path, want)
	}
}

// exampleHeader opens configs/gradiopool.example.yaml; the rest of the
// file is generated from gateway.Settings.
const exampleHeader = `# gradiopool serve --config configs/gradiopool.example.yaml
#
# Generated from the settings table (gateway.Settings) by
# TestExampleConfig: run it with GRADIOPOOL_UPDATE_README=1 after adding a
# key. Every key is here, at its default; a key without one is commented
# out, with an example value. Copied as it is with only replicas set (the
# one key required), it runs. Flags win over the environment, the
# environment over this file.
# Secrets are never read from a file: HF_TOKEN, GRADIOPOOL_ADMIN_TOKEN,
# GRADIOPOOL_API_KEYS (comma-separated), GRADIOPOOL_HASH_KEY and
# GRADIOPOOL_REDIS_URL (several gateways as one; needs GRADIOPOOL_HASH_KEY)
# come from the environment only.
`

// exampleConfig is the example configuration: each key with its help,
// environment variable and flag, sections as YAML mappings.
func exampleConfig() string {
	var b strings.Builder
	b.WriteString(exampleHeader)
	section := ""
	for _, s := range gateway.Settings() {
		sec, leaf, nested := strings.Cut(s.Key, ".")
		if !nested {
			sec, leaf = "", s.Key
		}
		indent := ""
		if sec != "" {
			indent = "  "
		}
		if sec != section {
			section = sec
			if sec != "" {
				fmt.Fprintf(&b, "\n%s:", sec)
			}
		}
		where := []string{}
		if s.Env != "" {
			where = append(where, "env "+s.Env)
		}
		if s.Flag != "" {
			where = append(where, "flag "+s.Flag)
		}
		b.WriteString("\n")
		fmt.Fprintf(&b, "%s# %s (%s", indent, s.Usage, s.Unit)
		if s.Default != "" && s.Example == "" {
			fmt.Fprintf(&b, "; default %s", s.Default)
		}
		if len(where) > 0 {
			fmt.Fprintf(&b, "; %s", strings.Join(where, ", "))
		}
		b.WriteString(")\n")
		switch {
		case s.Example != "" && s.Example == s.Default:
			fmt.Fprintf(&b, "%s%s: %s\n", indent, leaf, s.Example)
		case s.Example != "":
			// An illustration, not a default: commented out, so that a
			// copy of the file never announces example.com or pins
			// endpoints the operator's app does not have.
			fmt.Fprintf(&b, "%s# %s: %s\n", indent, leaf, s.Example)
		default:
			fmt.Fprintf(&b, "%s# %s:\n", indent, leaf)
		}
	}
	return b.String()
}

// TestExampleConfig: configs/gradiopool.example.yaml is the settings table
// (every key), so it cannot drift from the code; TestConfigExampleFile
// checks that it loads to the defaults.
func TestExampleConfig(t *testing.T) {
	const path = "../configs/gradiopool.example.yaml"
	want := exampleConfig()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) == want {
		return
	}
	if os.Getenv("GRADIOPOOL_UPDATE_README") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is out of date (rerun with GRADIOPOOL_UPDATE_README=1); want:\n%s", path, want)
}

// TestSecurityBoundsAreSettings: every setting docs/SECURITY.md lists as a
// bound exists in the settings table with the default it states, so the
// page cannot drift from the code.
func TestSecurityBoundsAreSettings(t *testing.T) {
	b, err := os.ReadFile("../docs/SECURITY.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "<!-- security-bounds:")
	end := strings.Index(doc, "<!-- /security-bounds -->")
	if start < 0 || end < start {
		t.Fatal("docs/SECURITY.md has no security-bounds table")
	}
	defaults := map[string]string{}
	for _, s := range gateway.Settings() {
		defaults[s.Key] = s.Default
	}
	rows := 0
	for _, line := range strings.Split(doc[start:end], "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		rows++
		key := strings.Trim(strings.TrimSpace(cells[1]), "`")
		def, ok := defaults[key]
		if !ok {
			t.Errorf("docs/SECURITY.md names %q, which is no setting", key)
			continue
		}
		if got := strings.TrimSpace(cells[2]); got != def {
			t.Errorf("docs/SECURITY.md: %s defaults to %q, the settings table says %q", key, got, def)
		}
	}
	if rows < 10 {
		t.Fatalf("docs/SECURITY.md lists %d bounds", rows)
	}
}
