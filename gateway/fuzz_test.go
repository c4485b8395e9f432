package gateway_test

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gradiopool/gradiopool/gateway"
)

// FuzzHeaders: whatever X-Gradiopool-Timeout and X-Gradiopool-User say,
// the gateway answers JSON with 200 or a 4xx, never a panic or a 5xx, and
// never echoes more than a bounded part of them.
func FuzzHeaders(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""}, {"90s", "a@example.com"}, {"1.5", " Bob@Example.COM "}, {"1e300", "x"}, {"NaN", "a b@c"},
		{"-1", "\x00"}, {"9223372036854775807ns", strings.Repeat("u", 400)}, {"+Inf", "é@ü.de"}, {"0.0000000001", "a@b\r\nX: y"},
	} {
		f.Add(s[0], s[1])
	}
	g := gateway.New(gateway.Config{MaxBodyBytes: 256}, newFake(), nil, nil)
	f.Fuzz(func(t *testing.T, timeout, user string) {
		req := httptest.NewRequest("POST", "/v1/predict/upper", strings.NewReader(`{"data":["a"]}`))
		// net/http refuses such header values on the wire; the handler
		// must still not trust what it gets.
		req.Header.Set(gateway.TimeoutHeader, timeout)
		req.Header.Set(gateway.UserHeader, user)
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		if rec.Code != 200 && (rec.Code < 400 || rec.Code >= 500) || !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("timeout %q user %q -> %d %s", timeout, user, rec.Code, rec.Body.String())
		}
		if rec.Body.Len() > 1000 {
			t.Fatalf("an answer of %d bytes echoes the input", rec.Body.Len())
		}
	})
}

// FuzzConfigYAML: any configuration file is loaded or refused with an
// error, never a panic; Normalize and Validate cope with what loaded.
func FuzzConfigYAML(f *testing.F) {
	if b, err := os.ReadFile("../configs/gradiopool.example.yaml"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{"listen: x\n", "replicas: [a/b, http://h]\npool: {max_connections: -1}\n", "pool:\n  idle_timeout: 1e400h\n", "bogus: 1\n", "&a [*a]", "replicas: !!binary aGk=\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c gateway.Config
		if err := c.LoadYAML("fuzz.yaml", b); err != nil {
			if !utf8.ValidString(err.Error()) && utf8.Valid(b) {
				t.Fatalf("error not UTF-8: %q", err)
			}
			return
		}
		c.Normalize()
		_ = c.Validate()
		_ = c.String()
	})
}
