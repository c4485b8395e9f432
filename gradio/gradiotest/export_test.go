package gradiotest

import "encoding/json"

// DiffForTest exposes the generator diff.
func DiffForTest(old, new string) string {
	return string(mustMarshal(diffJSON(json.RawMessage(old), json.RawMessage(new))))
}

// PythonJSONForTest exposes the json.dumps-style rewriter.
func PythonJSONForTest(s string) string { return string(pythonJSON([]byte(s))) }
