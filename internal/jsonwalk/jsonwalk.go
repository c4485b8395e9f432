// Package jsonwalk rewrites the objects of a decoded JSON value: the one
// tree walk that turns Gradio 3 file dicts into Gradio 5 FileData and back,
// for the front door's bridge and for the simulator's Gradio 3 mode.
package jsonwalk

// Replace walks x (a value decoded from JSON: maps, slices, scalars) and
// replaces every object that f takes (f returns its replacement and true);
// the objects f leaves are walked into. It rewrites x in place, returns the
// result and whether f took any object.
func Replace(x any, f func(map[string]any) (any, bool)) (any, bool) {
	changed := false
	var walk func(x any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case []any:
			for i := range t {
				t[i] = walk(t[i])
			}
		case map[string]any:
			if n, ok := f(t); ok {
				changed = true
				return n
			}
			for k, e := range t {
				t[k] = walk(e)
			}
		}
		return x
	}
	return walk(x), changed
}
