package gradiotest

import (
	"bytes"
	"encoding/json"
	"strings"
)

// An edit is one step of a generator diff: [action, path, value], as Gradio's
// utils.diff produces for process_generating messages (sse_v2 and later).
type edit [3]any

// diffJSON returns the edits that turn old into new. Both are JSON texts.
func diffJSON(old, new json.RawMessage) []edit {
	o, err1 := decodeAny(old)
	n, err2 := decodeAny(new)
	if err1 != nil || err2 != nil {
		return []edit{{"replace", []any{}, new}}
	}
	edits := compareValues(o, n, []any{})
	if edits == nil {
		edits = []edit{}
	}
	return edits
}

func decodeAny(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// pyType names the Python type a decoded JSON value would have, because
// Gradio's diff compares type(obj1) with type(obj2): 1 and 1.5 differ in type.
func pyType(v any) string {
	switch x := v.(type) {
	case nil:
		return "none"
	case bool:
		return "bool"
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			return "float"
		}
		return "int"
	case string:
		return "str"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	}
	return "?"
}

// pyEqual is Python's == on decoded JSON values (1 == 1.0 is true).
func pyEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		fx, e1 := x.Float64()
		fy, e2 := y.Float64()
		if e1 != nil || e2 != nil {
			return x == y
		}
		return fx == fy
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !pyEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !pyEqual(v, w) {
				return false
			}
		}
		return true
	}
	return false
}

func withKey(path []any, k any) []any {
	p := make([]any, len(path), len(path)+1)
	copy(p, path)
	return append(p, k)
}

// compareValues follows gradio/utils.py diff() (Gradio 6.x HEAD), including
// the renumbering of list deletions so that applying them in order works. The
// renumbering runs at every list level over all deletions collected so far,
// nested ones included, which reproduces Gradio's quirk: [[1,2,3]] -> [[1]]
// gives delete [0,1] then delete [0,0] (applying that yields [[3]]).
func compareValues(a, b any, path []any) []edit {
	if pyEqual(a, b) {
		return nil
	}
	if pyType(a) != pyType(b) {
		return []edit{{"replace", path, b}}
	}
	switch x := a.(type) {
	case string:
		y := b.(string)
		if strings.HasPrefix(y, x) {
			return []edit{{"append", path, y[len(x):]}}
		}
	case []any:
		y := b.([]any)
		common := min(len(x), len(y))
		var edits []edit
		for i := 0; i < common; i++ {
			edits = append(edits, compareValues(x[i], y[i], withKey(path, i))...)
		}
		for i := common; i < len(x); i++ {
			edits = append(edits, edit{"delete", withKey(path, i), nil})
		}
		deleted := 0
		for _, e := range edits {
			if e[0] != "delete" {
				continue
			}
			p := e[1].([]any)
			if n, ok := p[len(p)-1].(int); ok {
				p[len(p)-1] = n - deleted
				deleted++
			}
		}
		for i := common; i < len(y); i++ {
			edits = append(edits, edit{"add", withKey(path, i), y[i]})
		}
		return edits
	case map[string]any:
		y := b.(map[string]any)
		var edits []edit
		for _, k := range sortedKeys(x) {
			if w, ok := y[k]; ok {
				edits = append(edits, compareValues(x[k], w, withKey(path, k))...)
			} else {
				edits = append(edits, edit{"delete", withKey(path, k), nil})
			}
		}
		for _, k := range sortedKeys(y) {
			if _, ok := x[k]; !ok {
				edits = append(edits, edit{"add", withKey(path, k), y[k]})
			}
		}
		return edits
	}
	return []edit{{"replace", path, b}}
}
