package pool_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/pool"
)

// TestParseUser: the one user rule of the gateway and its front door:
// normalised, anonymous allowed, 320 bytes at most, no spaces or control
// characters.
func TestParseUser(t *testing.T) {
	long := strings.Repeat("a", 310) + "@example.c" // 320 bytes
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{"", "", false},
		{"  Alice@Example.COM ", "alice@example.com", false},
		{long, long, false},
		{long + "o", "", true},
		{"a b@example.com", "", true},
		{"a\tb@example.com", "", true},
		{"a\x00@example.com", "", true},
		{"a\n@example.com", "", true},
	} {
		got, err := pool.ParseUser(tc.in)
		if tc.bad != errors.Is(err, pool.ErrBadUser) || got != tc.want {
			t.Errorf("ParseUser(%q) = %q, %v", tc.in, got, err)
		}
	}
}
