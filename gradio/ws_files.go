package gradio

import (
	"encoding/json"
	"strings"
)

// Gradio 3 (ws) files. Gradio 3.x has no FileData model: a file component
// takes and returns a plain dict (gradio/components/file.py of 3.50.2)
//
//	{"name": "/tmp/gradio/<hash>/x.txt", "data": null, "is_file": true,
//	 "orig_name": "x.txt", "size": 12}
//
// where "name" is a path on the server: for inputs, one returned by POST
// /upload (the same multipart "files" request as in 4.x, answered with a
// list of paths); for outputs, a copy in the app's temp dir, fetched with
// GET /file={name}. An input with is_file false carries the bytes as a
// base64 data URL in "data" instead; the client always uploads.

// legacyFile is the Gradio 3 file dict, in the key order of Gradio 3's own
// postprocess.
type legacyFile struct {
	OrigName string `json:"orig_name,omitempty"`
	Name     string `json:"name"`
	Size     *int64 `json:"size,omitempty"`
	Data     any    `json:"data"`
	IsFile   bool   `json:"is_file"`
}

// legacyFiles replaces FileData values (as prepareArgs produced them) at
// any depth of v with Gradio 3 file dicts. A FileData that names a URL is
// refused: Gradio 3 only copies files that are already on its disk, so the
// caller must download the file and pass it as File or FileReader.
func legacyFiles(endpoint string, v any) (any, error) {
	switch x := v.(type) {
	case FileData:
		return toLegacyFile(endpoint, x)
	case *FileData:
		if x == nil {
			return nil, nil
		}
		return toLegacyFile(endpoint, *x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			n, err := legacyFiles(endpoint, e)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			n, err := legacyFiles(endpoint, e)
			if err != nil {
				return nil, err
			}
			out[k] = n
		}
		return out, nil
	}
	return v, nil
}

func toLegacyFile(endpoint string, fd FileData) (legacyFile, error) {
	p := fd.Path
	if p == "" || strings.HasPrefix(p, "http://") || strings.HasPrefix(p, "https://") {
		return legacyFile{}, &ArgumentError{Endpoint: endpoint, Msg: "Gradio 3 apps take only uploaded files: URL file arguments are not supported there (download the file and pass gradio.File or gradio.FileReader)"}
	}
	return legacyFile{OrigName: fd.OrigName, Name: p, Size: fd.Size, IsFile: true}, nil
}

// legacyFileData reads a Gradio 3 file dict as FileData (Path from "name");
// ok is false for anything else.
func legacyFileData(raw json.RawMessage) (FileData, bool) {
	var lf struct {
		Name     *string `json:"name"`
		IsFile   *bool   `json:"is_file"`
		OrigName string  `json:"orig_name"`
		Size     *int64  `json:"size"`
		Data     *string `json:"data"`
	}
	if json.Unmarshal(raw, &lf) != nil || lf.Name == nil || *lf.Name == "" || lf.IsFile == nil {
		return FileData{}, false
	}
	if !*lf.IsFile {
		// Inline base64 data (Gradio 3 outputs never use it, inputs may).
		return FileData{}, false
	}
	return FileData{Path: *lf.Name, OrigName: lf.OrigName, Size: lf.Size}, true
}
