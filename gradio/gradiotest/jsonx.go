package gradiotest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// obj is a JSON object that keeps its keys in insertion order. Gradio's
// messages are Python dicts and pydantic models whose field order is part of
// what the captures show, so the simulator writes them in the same order.
type obj []field

type field struct {
	k string
	v any
}

func (o obj) set(k string, v any) obj { return append(o, field{k, v}) }

// MarshalJSON writes the fields in order.
func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshal(f.k)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		v, err := marshal(f.v)
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", f.k, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshal is json.Marshal without HTML escaping (orjson and Python's json
// module do not escape <, > and &) and without the trailing newline.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// mustMarshal is marshal for values built by the simulator itself.
func mustMarshal(v any) []byte {
	b, err := marshal(v)
	if err != nil {
		panic("gradiotest: " + err.Error())
	}
	return b
}

// pythonJSON rewrites compact JSON the way Python's json.dumps writes it with
// default arguments (", " and ": " separators, non-ASCII as \uXXXX). Gradio
// 4.x serialised /queue/data messages that way; 5.x uses compact orjson.
func pythonJSON(compact []byte) []byte {
	out := make([]byte, 0, len(compact)+len(compact)/8)
	inStr := false
	for i := 0; i < len(compact); {
		c := compact[i]
		if inStr {
			switch {
			case c == '\\':
				out = append(out, c, compact[i+1])
				i += 2
				continue
			case c == '"':
				inStr = false
			case c >= 0x80:
				r, size := utf8.DecodeRune(compact[i:])
				if r >= 0x10000 {
					r -= 0x10000
					out = fmt.Appendf(out, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
				} else {
					out = fmt.Appendf(out, `\u%04x`, r)
				}
				i += size
				continue
			}
			out = append(out, c)
			i++
			continue
		}
		switch c {
		case '"':
			inStr = true
			out = append(out, c)
		case ',':
			out = append(out, ',', ' ')
		case ':':
			out = append(out, ':', ' ')
		default:
			out = append(out, c)
		}
		i++
	}
	return out
}
