package gateway

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/pool"
)

// TestSettingsTable checks the table's own rules, so that a row added
// later cannot break them: names follow the key, keys are unique and their
// sections adjacent (top-level keys may follow any section), every default fits its field, and the defaults shown
// for the pool's keys are the ones package pool applies.
func TestSettingsTable(t *testing.T) {
	seen := map[string]bool{}
	closed := map[string]bool{} // sections already left
	section := ""
	effective := (pool.Config{}).WithDefaults()
	for _, s := range settings {
		t.Run(s.key, func(t *testing.T) {
			if seen[s.key] {
				t.Fatal("key listed twice")
			}
			seen[s.key] = true
			env := "GRADIOPOOL_" + strings.ToUpper(strings.ReplaceAll(s.key, ".", "_"))
			if s.env != "" && s.env != env {
				t.Errorf("env %s, want %s", s.env, env)
			}
			flagName := strings.NewReplacer(".", "-", "_", "-").Replace(strings.TrimPrefix(s.key, "pool."))
			if s.flag != "" && s.flag != flagName {
				t.Errorf("flag %s, want %s", s.flag, flagName)
			}
			if s.help == "" {
				t.Error("no help")
			}
			var c Config
			f := s.ptr(&c)
			if s.def != nil && !reflect.ValueOf(s.def).CanConvert(f.Type()) {
				t.Fatalf("default %T does not fit the field's %s", s.def, f.Type())
			}
			if strings.HasPrefix(s.key, "pool.") && s.def != nil {
				want := reflect.ValueOf(s.def).Convert(f.Type()).Interface()
				c.Pool = effective
				if got := s.ptr(&c).Interface(); got != want {
					t.Errorf("the table shows default %v, pool.Config.WithDefaults gives %v", want, got)
				}
			}
		})
		sec, _, nested := strings.Cut(s.key, ".")
		if !nested {
			sec = ""
		}
		if sec != section {
			if sec != "" && closed[sec] {
				t.Errorf("%s: section %s is not adjacent", s.key, sec)
			}
			closed[section] = true
			section = sec
		}
	}
}

// TestNormalizeOnce: Normalize applies defaults once; a normalized Config
// passed on (Open, New, PoolConfig) is not normalized again.
func TestNormalizeOnce(t *testing.T) {
	var c Config
	c.Normalize()
	if c.Listen != DefaultListen || c.Pool.MaxConnections != (pool.Config{}).WithDefaults().MaxConnections || c.Log.Level != "info" || c.Cluster.Name != defaultClusterName {
		t.Fatalf("defaults not applied: %v", c)
	}
	c.Listen = "" // a normalized config is taken as it is
	c.Normalize()
	if c.Listen != "" {
		t.Fatal("Normalize ran twice")
	}
}
