// Package diff applies the edit lists Gradio (sse_v2 and later) sends for
// generator outputs: each process_generating after the first carries, per
// output, a list of [action, path, value] edits from the previous value.
//
//	v, err := diff.Apply(prev, edits) // prev and v are decoded JSON values
//
// # Semantics
//
// Values are what encoding/json decodes into any (with UseNumber: strings,
// json.Number, bool, nil, []any, map[string]any). An empty path addresses the
// value itself: "replace" returns the edit's value and "append" concatenates
// strings (or lists). Otherwise path[:len-1] is walked (list indices are
// numbers, dict keys strings) and the last key is acted on: "replace" sets,
// "append" concatenates, "add" inserts into a list at the index (or sets a
// dict key) and "delete" removes. Edits are applied in order and verbatim, as
// both official clients do, including Gradio's renumbering quirk for nested
// deletes. Apply never modifies prev in place where a caller could observe
// it: containers on the edited path are copied first.
package diff
