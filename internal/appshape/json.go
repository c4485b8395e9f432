package appshape

import (
	"bytes"
	"encoding/json"
)

// Marshal encodes v as Gradio does (orjson): no HTML escaping. v must
// be made of JSON values (maps, slices, strings, numbers, nil).
func Marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only maps of JSON values are encoded here
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// IsFileData reports whether a JSON object with a path is Gradio 4's
// FileData (meta._type, or the fields every 4.x FileData has).
func IsFileData(t map[string]any) bool {
	if m, ok := t["meta"].(map[string]any); ok {
		return m["_type"] == "gradio.FileData"
	}
	_, url := t["url"]
	_, name := t["orig_name"]
	return url || name
}

// decodeJSON decodes b keeping numbers as written.
func decodeJSON(b []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	return v, true
}
