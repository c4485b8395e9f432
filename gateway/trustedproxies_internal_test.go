package gateway

import (
	"net/http"
	"testing"

	"github.com/gradiopool/gradiopool/pool"
)

// TestClientAddr (issue 33): forwarded-address headers count only from a
// trusted proxy, and then only the nearest untrusted hop: what a client
// writes into them itself is never its address.
func TestClientAddr(t *testing.T) {
	trusted, err := parseTrustedProxies([]string{"10.0.0.0/8", " 192.0.2.7 ", "::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{trusted: trusted}
	for _, tc := range []struct {
		name, peer string
		hdr        []string
		want       string
	}{
		{"no header", "10.1.2.3:5000", nil, "10.1.2.3"},
		{"untrusted peer spoofing", "203.0.113.9:5000", []string{"X-Forwarded-For", "198.51.100.1"}, "203.0.113.9"},
		{"untrusted peer spoofing Forwarded", "203.0.113.9:5000", []string{"Forwarded", "for=198.51.100.1"}, "203.0.113.9"},
		{"trusted proxy", "10.1.2.3:5000", []string{"X-Forwarded-For", "198.51.100.1"}, "198.51.100.1"},
		{"client's own spoof left of the proxy's hop", "10.1.2.3:5000", []string{"X-Forwarded-For", "1.1.1.1, 198.51.100.1"}, "198.51.100.1"},
		{"two trusted proxies", "10.1.2.3:5000", []string{"X-Forwarded-For", "1.1.1.1, 198.51.100.1, 192.0.2.7"}, "198.51.100.1"},
		{"every hop trusted", "10.1.2.3:5000", []string{"X-Forwarded-For", "10.9.9.9, 192.0.2.7"}, "10.9.9.9"},
		{"garbage hop", "10.1.2.3:5000", []string{"X-Forwarded-For", "198.51.100.1, not-an-ip"}, "10.1.2.3"},
		{"Forwarded", "10.1.2.3:5000", []string{"Forwarded", `for="[2001:db8::17]:4711";proto=https, for=192.0.2.7`}, "2001:db8::17"},
		{"Forwarded with port", "[::1]:5000", []string{"Forwarded", "for=198.51.100.4:80"}, "198.51.100.4"},
		{"X-Forwarded-For wins over Forwarded", "10.1.2.3:5000", []string{"X-Forwarded-For", "198.51.100.1", "Forwarded", "for=1.1.1.1"}, "198.51.100.1"},
		{"mapped v4", "10.1.2.3:5000", []string{"X-Forwarded-For", "::ffff:198.51.100.1"}, "198.51.100.1"},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		for i := 0; i+1 < len(tc.hdr); i += 2 {
			r.Header.Add(tc.hdr[i], tc.hdr[i+1])
		}
		if got := g.clientAddr(r); got != tc.want {
			t.Errorf("%s: client %q, want %q", tc.name, got, tc.want)
		}
	}
	// Without trusted proxies the headers never count.
	r, _ := http.NewRequest("GET", "/", nil)
	r.RemoteAddr, r.Header["X-Forwarded-For"] = "127.0.0.1:1", []string{"198.51.100.1"}
	if got := (&Gateway{}).clientAddr(r); got != "127.0.0.1" {
		t.Errorf("no trusted proxies: %q", got)
	}
	for _, bad := range []string{"10.0.0.0/33", "localhost", "10.0.0.1/8/2"} {
		if _, err := parseTrustedProxies([]string{bad}); err == nil {
			t.Errorf("trusted_proxies %q accepted", bad)
		}
	}
}

// TestPerUserLimitDefault: max_calls_per_user's derived default is a
// quarter of the slots, at least 8; a value set wins.
func TestPerUserLimitDefault(t *testing.T) {
	three := []string{"http://a", "http://b", "http://c"}
	for _, tc := range []struct {
		cfg  Config
		want int
	}{
		{Config{Pool: pool.Config{Replicas: three}}, 37}, // 3 × 50 / 4
		{Config{Pool: pool.Config{Replicas: three[:1], MaxConnections: 4}}, 8},
		{Config{Pool: pool.Config{Replicas: three}, MaxCallsPerUser: 3}, 3},
		{Config{Pool: pool.Config{Replicas: three}, MaxCallsPerUser: -1}, -1},
	} {
		if got := perUserLimit(tc.cfg); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.cfg.Pool, got, tc.want)
		}
	}
}
