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
