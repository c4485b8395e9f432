package appshape

// Gradio 3 (ws) replicas behind the front door's bridge: what differs
// from the 4.x generations besides the transport (which the Go client
// speaks).
//
// Gradio 3.x has no FileData: a file component takes and returns a plain
// dict {"name": <server path>, "data": null, "is_file": true, "orig_name",
// "size"} (gradio/components/file.py of 3.50.2). Callers speaking Gradio 5
// send and expect FileData ({"path", "url", "meta": {"_type":
// "gradio.FileData"}}), so the bridge turns one into the other both ways.
// Its /info lists parameters without the Python names Gradio 5 adds
// (parameter_name, parameter_has_default) and describes file components
// with Gradio 3's serializer types; the bridge presents them in Gradio 5's
// shape: the clients build keyword arguments and file handling from it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"path"
	"strconv"
	"strings"
	"unicode"

	"github.com/gradiopool/gradiopool/internal/jsonwalk"
)

// ErrFileURL is WSArgs' answer to a file passed by URL: a caller's fault
// (Gradio 3 only reads files already on its disk). Its text is for the
// caller.
var ErrFileURL = errors.New("gradiopool: this app runs Gradio 3, which takes only uploaded files: upload the file instead of passing its URL")

// ProtocolWS is the Go client's name for Gradio 3's protocol.
const ProtocolWS = "ws"

// wsFileSerializers are Gradio 3's serializers whose values are file
// dicts (VideoSerializable is a FileSerializable there). Image, audio and
// gallery values of Gradio 3 are base64 data or lists of pairs and are
// passed as they are.
var wsFileSerializers = map[string]bool{"FileSerializable": true, "VideoSerializable": true}

// WSArgs turns the FileData in a bridged join's data (already localized:
// paths on the replica) into Gradio 3 file dicts. A FileData naming a URL
// is refused: Gradio 3 only reads files already on its disk.
func WSArgs(data json.RawMessage) (json.RawMessage, error) {
	if !bytes.Contains(data, []byte(`"path"`)) {
		return data, nil
	}
	v, ok := decodeJSON(data)
	if !ok {
		return data, nil // the caller's fault is reported by the join
	}
	var bad bool
	v, _ = jsonwalk.Replace(v, func(t map[string]any) (any, bool) {
		p, ok := t["path"].(string)
		if !ok || !IsFileData(t) {
			return nil, false
		}
		if strings.HasPrefix(p, "http://") || strings.HasPrefix(p, "https://") || p == "" {
			bad = true
			return t, true
		}
		lf := map[string]any{"name": p, "data": nil, "is_file": true}
		if n, _ := t["orig_name"].(string); n != "" {
			lf["orig_name"] = n
		}
		if s, ok := t["size"].(json.Number); ok {
			lf["size"] = s
		}
		return lf, true
	})
	if bad {
		return nil, ErrFileURL
	}
	return Marshal(v), nil
}

// WSOutputFiles turns the Gradio 3 file dicts in an output value into
// FileData with a path (the bridge then points them at the gateway).
func WSOutputFiles(v json.RawMessage) json.RawMessage {
	if !bytes.Contains(v, []byte(`"is_file"`)) {
		return v
	}
	x, ok := decodeJSON(v)
	if !ok {
		return v
	}
	x, changed := jsonwalk.Replace(x, func(t map[string]any) (any, bool) {
		name, ok := t["name"].(string)
		if isFile, _ := t["is_file"].(bool); !ok || !isFile || !strings.HasPrefix(name, "/") {
			return nil, false
		}
		fd := map[string]any{"path": name, "url": nil, "orig_name": t["orig_name"], "size": t["size"],
			"mime_type": nil, "is_stream": false, "meta": map[string]any{"_type": "gradio.FileData"}}
		if fd["orig_name"] == nil {
			fd["orig_name"] = ""
		}
		return fd, true
	})
	if !changed {
		return v
	}
	return Marshal(x)
}

// wsFileType is Gradio 5's API type of a FileData value.
var wsFileType = map[string]any{
	"title": "FileData", "type": "object", "required": []any{"path"},
	"properties": map[string]any{
		"path":      map[string]any{"title": "Path", "type": "string"},
		"url":       map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "null"}}, "default": nil, "title": "Url"},
		"size":      map[string]any{"anyOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "null"}}, "default": nil, "title": "Size"},
		"orig_name": map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "null"}}, "default": nil, "title": "Orig Name"},
		"mime_type": map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "null"}}, "default": nil, "title": "Mime Type"},
		"is_stream": map[string]any{"default": false, "title": "Is Stream", "type": "boolean"},
		"meta":      map[string]any{"$ref": "#/$defs/FileDataMeta"},
	},
	"$defs": map[string]any{"FileDataMeta": map[string]any{"title": "FileDataMeta", "type": "object", "required": []any{"_type"},
		"properties": map[string]any{"_type": map[string]any{"const": "gradio.FileData", "title": "Type", "type": "string"}}}},
}

// wsEndpoint presents one endpoint of a Gradio 3 /info in Gradio 5's
// shape (the parameter names are PresentInfo's): file components get
// FileData types, the serializers go.
func wsEndpoint(e map[string]any) {
	params, _ := e["parameters"].([]any)
	for _, p := range params {
		pm, ok := p.(map[string]any)
		if !ok {
			continue
		}
		if wsFileValue(pm) {
			if u, ok := pm["example_input"].(string); ok {
				pm["example_input"] = map[string]any{"path": u, "url": u, "orig_name": path.Base(u),
					"meta": map[string]any{"_type": "gradio.FileData"}}
			}
		}
		delete(pm, "serializer")
	}
	returns, _ := e["returns"].([]any)
	for _, r := range returns {
		if rm, ok := r.(map[string]any); ok {
			wsFileValue(rm)
			delete(rm, "serializer")
		}
	}
	if _, has := e["show_api"]; !has {
		e["show_api"] = true
	}
	if _, has := e["description"]; !has {
		e["description"] = ""
	}
}

// objectKeys lists the keys of the JSON object b in their order (once
// each); nil when b is not an object.
func objectKeys(b []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var keys []string
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return keys
		}
		k, _ := t.(string)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return keys
		}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// wsFileValue gives a parameter or return of a file serializer Gradio 5's
// FileData type; it reports whether it did.
func wsFileValue(m map[string]any) bool {
	s, _ := m["serializer"].(string)
	if !wsFileSerializers[s] {
		return false
	}
	m["type"] = wsFileType
	m["python_type"] = map[string]any{"type": "filepath", "description": ""}
	return true
}

// identifier makes a Python-like parameter name of a label ("Input
// text" -> "input_text"); an empty one is param_<i>.
func identifier(label string, i int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(label)) {
		switch {
		case r == '_' || (r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r))):
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "_"):
			b.WriteByte('_')
		}
	}
	s := strings.Trim(b.String(), "_")
	if s == "" || unicode.IsDigit(rune(s[0])) || pythonKeyword[s] {
		return "param_" + strconv.Itoa(i)
	}
	return s
}

// pythonKeyword are the labels that cannot be keyword argument names.
var pythonKeyword = map[string]bool{"in": true, "is": true, "if": true, "or": true, "and": true, "not": true, "for": true,
	"def": true, "del": true, "try": true, "as": true, "from": true, "with": true, "class": true, "return": true,
	"import": true, "pass": true, "else": true, "elif": true, "while": true, "break": true, "lambda": true,
	"global": true, "yield": true, "raise": true, "assert": true, "except": true, "finally": true,
	"continue": true, "nonlocal": true, "none": true, "true": true, "false": true, "async": true, "await": true}
