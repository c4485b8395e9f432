package gradio

import "testing"

func TestUnPyRepr(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{`"deliberate failure for input 'boom'"`, "deliberate failure for input 'boom'", true},
		{`'plain'`, "plain", true},
		{`'it\'s \\ \n\t \xe9 \u2713'`, "it's \\ \n\t é ✓", true},
		{`plain`, "", false},
		{`"a" and "b"`, "", false},
		{`'unterminated`, "", false},
		{`'bad \q'`, "", false},
		{`'\x4'`, "", false},
	} {
		got, ok := unPyRepr(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("unPyRepr(%s) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestPyRepr: Python 3's repr of a str (checked against CPython 3.11), and
// UnPyRepr takes it back.
func TestPyRepr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"deliberate failure for input 'boom'", `"deliberate failure for input 'boom'"`},
		{"plain", `'plain'`},
		{`both ' and "`, `'both \' and "'`},
		{"tab\tline\nback\\ \x01 \u00a0 é ✓", `'tab\tline\nback\\ \x01 \xa0 é ✓'`},
	} {
		got := PyRepr(tc.in)
		if got != tc.want {
			t.Errorf("PyRepr(%q) = %s, want %s", tc.in, got, tc.want)
		}
		if back, ok := UnPyRepr(got); !ok || back != tc.in {
			t.Errorf("UnPyRepr(PyRepr(%q)) = %q, %v", tc.in, back, ok)
		}
	}
}
