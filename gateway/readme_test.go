package gateway_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gateway"
)

// The README's configuration table is generated from gateway.Settings, so
// the defaults it shows are the constants the code uses. Run with
// GRADIOPOOL_UPDATE_README=1 to rewrite it after adding a key.
const (
	tableStart = "<!-- config-table: generated from gateway.Settings by TestREADMEConfigTable -->\n"
	tableEnd   = "<!-- /config-table -->"
)

func configTable() string {
	var b strings.Builder
	b.WriteString("| key | environment | flag | default | meaning |\n|---|---|---|---|---|\n")
	for _, s := range gateway.Settings() {
		def := s.Default
		switch {
		case s.Key == "replicas":
			def = "required"
		case def == "":
			def = "none"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | `%s` | %s | %s |\n", s.Key, s.Env, s.Flag, def, s.Usage)
	}
	return b.String()
}

func TestREADMEConfigTable(t *testing.T) {
	const path = "../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i := strings.Index(readme, tableStart)
	j := strings.Index(readme, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks the markers %q ... %q", strings.TrimSpace(tableStart), tableEnd)
	}
	want := configTable()
	if got := readme[i+len(tableStart) : j]; got != want {
		if os.Getenv("GRADIOPOOL_UPDATE_README") == "1" {
			if err := os.WriteFile(path, []byte(readme[:i+len(tableStart)]+want+readme[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("README.md's configuration table is out of date (rerun with GRADIOPOOL_UPDATE_README=1); want:\n%s", want)
	}
}
