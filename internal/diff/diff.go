package diff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Edit is one [action, path, value] triple.
type Edit struct {
	Action string
	Path   []any
	Value  any
}

// UnmarshalJSON decodes the wire form ["action", [path...], value].
func (e *Edit) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("diff: edit is not a list: %w", err)
	}
	if len(raw) != 3 {
		return fmt.Errorf("diff: edit has %d elements, want 3", len(raw))
	}
	if err := json.Unmarshal(raw[0], &e.Action); err != nil {
		return fmt.Errorf("diff: edit action: %w", err)
	}
	if err := decode(raw[1], &e.Path); err != nil {
		return fmt.Errorf("diff: edit path: %w", err)
	}
	return decode(raw[2], &e.Value)
}

func decode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// Parse decodes a JSON edit list.
func Parse(b []byte) ([]Edit, error) {
	var edits []Edit
	if err := json.Unmarshal(b, &edits); err != nil {
		return nil, err
	}
	return edits, nil
}

// IsEditList reports whether a decoded value has the shape of an edit list
// (a list of 3-element lists whose first element is a known action). An
// empty list is an edit list too ("unchanged").
func IsEditList(b []byte) bool {
	var raw []json.RawMessage
	if json.Unmarshal(b, &raw) != nil {
		return false
	}
	for _, r := range raw {
		var e Edit
		if e.UnmarshalJSON(r) != nil {
			return false
		}
		switch e.Action {
		case "replace", "append", "add", "delete":
		default:
			return false
		}
	}
	return true
}

// Apply applies edits to v and returns the result.
func Apply(v any, edits []Edit) (any, error) {
	var err error
	for i, e := range edits {
		v, err = apply(v, e.Path, e)
		if err != nil {
			return nil, fmt.Errorf("diff: edit %d (%s %v): %w", i, e.Action, e.Path, err)
		}
	}
	return v, nil
}

// apply applies e at path below v, copying each container it changes.
func apply(v any, path []any, e Edit) (any, error) {
	if len(path) == 0 {
		switch e.Action {
		case "replace":
			return e.Value, nil
		case "append":
			return concat(v, e.Value)
		default:
			return nil, fmt.Errorf("action %q needs a non-empty path", e.Action)
		}
	}
	key := path[0]
	if len(path) > 1 {
		switch c := v.(type) {
		case []any:
			i, err := index(key, len(c), false)
			if err != nil {
				return nil, err
			}
			child, err := apply(c[i], path[1:], e)
			if err != nil {
				return nil, err
			}
			n := append([]any(nil), c...)
			n[i] = child
			return n, nil
		case map[string]any:
			k, ok := key.(string)
			if !ok {
				return nil, fmt.Errorf("key %v of a dict is not a string", key)
			}
			child, err := apply(c[k], path[1:], e)
			if err != nil {
				return nil, err
			}
			n := make(map[string]any, len(c)+1)
			for kk, vv := range c {
				n[kk] = vv
			}
			n[k] = child
			return n, nil
		default:
			return nil, fmt.Errorf("cannot walk into %T", v)
		}
	}
	switch c := v.(type) {
	case []any:
		switch e.Action {
		case "add":
			i, err := index(key, len(c), true)
			if err != nil {
				return nil, err
			}
			n := make([]any, 0, len(c)+1)
			n = append(n, c[:i]...)
			n = append(n, e.Value)
			return append(n, c[i:]...), nil
		case "delete":
			i, err := index(key, len(c), false)
			if err != nil {
				return nil, err
			}
			n := make([]any, 0, len(c)-1)
			n = append(n, c[:i]...)
			return append(n, c[i+1:]...), nil
		case "replace", "append":
			i, err := index(key, len(c), false)
			if err != nil {
				return nil, err
			}
			nv := e.Value
			if e.Action == "append" {
				if nv, err = concat(c[i], e.Value); err != nil {
					return nil, err
				}
			}
			n := append([]any(nil), c...)
			n[i] = nv
			return n, nil
		}
	case map[string]any:
		k, ok := key.(string)
		if !ok {
			return nil, fmt.Errorf("key %v of a dict is not a string", key)
		}
		n := make(map[string]any, len(c)+1)
		for kk, vv := range c {
			n[kk] = vv
		}
		switch e.Action {
		case "add", "replace":
			n[k] = e.Value
		case "append":
			nv, err := concat(c[k], e.Value)
			if err != nil {
				return nil, err
			}
			n[k] = nv
		case "delete":
			delete(n, k)
		default:
			return nil, fmt.Errorf("unknown action %q", e.Action)
		}
		return n, nil
	default:
		return nil, fmt.Errorf("cannot edit inside %T", v)
	}
	return nil, fmt.Errorf("unknown action %q", e.Action)
}

// concat implements "append": strings concatenate, lists extend.
func concat(a, b any) (any, error) {
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return x + y, nil
		}
	case []any:
		if y, ok := b.([]any); ok {
			return append(append([]any(nil), x...), y...), nil
		}
	case nil:
		// Python's None + "x" fails; the JS client yields "nullx". Treat a
		// missing value as empty, which is what a fresh output means.
		return b, nil
	}
	return nil, fmt.Errorf("cannot append %T to %T", b, a)
}

// index converts a path element to a list index in [0, n) (or [0, n] for
// inserts).
func index(key any, n int, insert bool) (int, error) {
	var i int
	switch k := key.(type) {
	case json.Number:
		v, err := strconv.Atoi(k.String())
		if err != nil {
			return 0, fmt.Errorf("list index %v is not an integer", k)
		}
		i = v
	case float64:
		i = int(k)
		if float64(i) != k {
			return 0, fmt.Errorf("list index %v is not an integer", k)
		}
	case int:
		i = k
	default:
		return 0, fmt.Errorf("list index %v (%T) is not a number", key, key)
	}
	limit := n
	if insert {
		limit = n + 1
	}
	if i < 0 || i >= limit {
		return 0, fmt.Errorf("list index %d out of range (length %d)", i, n)
	}
	return i, nil
}
