package gradio_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

// transcriptBodies returns the response bodies of the recorded transcripts
// that answered GET path (e.g. "/config", "/gradio_api/info").
func transcriptBodies(f *testing.F, suffix string) [][]byte {
	f.Helper()
	files, _ := filepath.Glob("testdata/transcripts/*.txt")
	var out [][]byte
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 8<<20)
		want := false
		body := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "=== ") && strings.Contains(line, "RESPONSE 200") && strings.HasSuffix(line, suffix+")"):
				want = true
			case strings.HasPrefix(line, "=== "):
				want = false
			case want && strings.HasPrefix(line, "--- ") && strings.Contains(line, "response body"):
				body = true
			case body:
				out = append(out, []byte(line))
				body, want = false, false
			}
		}
		fh.Close()
	}
	return out
}

func fixtures(f *testing.F, pattern string) [][]byte {
	f.Helper()
	files, _ := filepath.Glob(filepath.Join("testdata/fixtures", pattern))
	var out [][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// FuzzParseConfig: any /config body is parsed or refused with an error,
// never a panic; a parsed config answers Endpoint for any name.
func FuzzParseConfig(f *testing.F) {
	for _, b := range append(fixtures(f, "config_*.json"), transcriptBodies(f, "GET /config")...) {
		f.Add(b)
	}
	f.Add([]byte(`{"version":"5.0.0","protocol":"sse_v3","components":[],"dependencies":[{"id":0,"api_name":"x","backend_fn":true}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := gradio.ParseConfig(b)
		if err != nil {
			return
		}
		for _, name := range []string{"x", "/x", "#0", "#-1", "#999999999999999999999", ""} {
			_, _ = cfg.Endpoint(name)
		}
	})
}

// FuzzParseAPIInfo: any /info body is parsed or refused, never a panic.
func FuzzParseAPIInfo(f *testing.F) {
	for _, b := range append(fixtures(f, "info_*.json"), transcriptBodies(f, "/info")...) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = gradio.ParseAPIInfo(b)
	})
}

// FuzzParseFileData: any output value is a FileData or an error.
func FuzzParseFileData(f *testing.F) {
	for _, s := range []string{`{"path":"/tmp/x","url":"http://h/file=/tmp/x","meta":{"_type":"gradio.FileData"}}`, `"x"`, `null`, `{"path":1}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = gradio.ParseFileData(b)
	})
}
