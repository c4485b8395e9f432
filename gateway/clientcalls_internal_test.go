package gateway

import (
	"testing"

	"github.com/gradiopool/gradiopool/pool"
)

// TestPerClientLimitDerived: max_calls_per_client's derived default is half
// of the slots (waiting places left out), per key with two keys or more,
// per non-loopback address without keys, none with one key; a value set
// applies to everyone.
func TestPerClientLimitDerived(t *testing.T) {
	three := pool.Config{Replicas: []string{"a", "b", "c"}, MaxConnections: 8, MaxWaiters: 1000}
	for _, tc := range []struct {
		name       string
		cfg        Config
		want       int
		wantExempt bool
	}{
		{"no keys", Config{Pool: three}, 12, true},
		{"two keys", Config{Pool: three, Secrets: Secrets{APIKeys: []string{"k1", "k2"}}}, 12, false},
		{"one key", Config{Pool: three, Secrets: Secrets{APIKeys: []string{"k1"}}}, -1, false},
		{"set", Config{Pool: three, MaxCallsPerClient: 5}, 5, false},
		{"set, negative", Config{Pool: three, MaxCallsPerClient: -1}, -1, false},
		{"pool defaults", Config{Pool: pool.Config{Replicas: []string{"a", "b", "c"}}}, 75, true},
		{"one slot", Config{Pool: pool.Config{Replicas: []string{"a"}, MaxConnections: 1}}, 1, true},
		{"no replicas", Config{}, -1, false},
	} {
		got, exempt := perClientLimit(tc.cfg)
		if got != tc.want || exempt != tc.wantExempt {
			t.Errorf("%s: limit %d, loopback exempt %v; want %d, %v", tc.name, got, exempt, tc.want, tc.wantExempt)
		}
	}
	for client, want := range map[string]bool{
		"addr:127.0.0.1": true, "addr:127.3.4.5": true, "addr:::1": true, "addr:::ffff:127.0.0.1": true,
		"addr:192.0.2.7": false, "addr:10.0.0.1": false, "key:127.0.0.1": false, "addr:": false, "addr:localhost": false,
	} {
		if got := loopbackClient(client); got != want {
			t.Errorf("loopbackClient(%q) = %v", client, got)
		}
	}
}
