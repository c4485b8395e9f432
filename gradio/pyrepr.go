package gradio

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Gradio before 5.0 sends a gr.Error's message as str(error), which is
// repr(message) (gradio/exceptions.py: Error.__str__), so the text on the
// wire carries Python quotes: "\"deliberate failure for input 'boom'\"".
// Measured on 3.50.2, 4.8.0, 4.16.0, 4.20.1 and 4.44.1; 5.x sends the
// message itself. appErr undoes the repr so that callers see the same
// message from every release.

// appErr builds the *AppError of a failed output for this app.
func (s *appSession) appErr(o *output, msgTitle *string) error {
	err := o.appError(msgTitle)
	if ae, ok := err.(*AppError); ok && !ae.Hidden && !versionAtLeast(s.app.cfg.Version, "5.0") {
		if m, ok := unPyRepr(ae.Message); ok {
			ae.Message = m
		}
	}
	return err
}

// UnPyRepr decodes a Python str repr ('...' or "...", as Gradio before
// 5.0 sends a gr.Error's message); ok is false when s is not one.
func UnPyRepr(s string) (string, bool) { return unPyRepr(s) }

// PyRepr is Python 3's repr of the str s: the message text Gradio before
// 5.0 sends for a gr.Error raised with s (the front door presents a
// Gradio 4 app's errors so when a Gradio 5 replica ran the call).
func PyRepr(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\' || r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r > 0x7f && !unicode.IsPrint(r):
			if r <= 0xff {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else if r <= 0xffff {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// unPyRepr decodes a Python str repr ('...' or "..." with backslash
// escapes); ok is false when s is not one.
func unPyRepr(s string) (string, bool) {
	if len(s) < 2 || (s[0] != '\'' && s[0] != '"') || s[len(s)-1] != s[0] {
		return "", false
	}
	q := s[0]
	body := s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c == q {
			return "", false // an unescaped quote: not one repr
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(body) {
			return "", false
		}
		i++
		switch e := body[i]; e {
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+n > len(body) {
				return "", false
			}
			v, err := strconv.ParseUint(body[i+1:i+1+n], 16, 32)
			if err != nil {
				return "", false
			}
			b.WriteRune(rune(v))
			i += n
		default:
			return "", false
		}
	}
	return b.String(), true
}
