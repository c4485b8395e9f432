package gradio_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
)

// gradio3FileRecord is a reverse_file call recorded on a real Gradio 3.50.2
// app (testdata/realgradio/record_gradio3_file.py).
type gradio3FileRecord struct {
	Payload        string `json:"payload"`
	UploadResponse string `json:"upload_response"`
	FnIndex        int    `json:"fn_index"`
	Frames         []struct {
		From string `json:"from"`
		Text string `json:"text"`
	} `json:"frames"`
	Download struct {
		Status      int    `json:"status"`
		ContentType string `json:"content_type"`
		Body        string `json:"body"`
	} `json:"download"`
}

// TestGradio3FileArgument replays the real Gradio 3.50.2 reverse_file call:
// the client uploads through /upload, sends Gradio 3's file dict over the
// WebSocket (checked against the recorded frame), reads the file dict the
// app returned as FileData and downloads it from /file=.
func TestGradio3FileArgument(t *testing.T) {
	config, info, _ := parseWSTranscript(t)
	b, err := os.ReadFile("testdata/transcripts/gradio-3.50.2_reverse-file_ws.json")
	if err != nil {
		t.Fatal(err)
	}
	var rec gradio3FileRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	var session []wsStep
	for _, f := range rec.Frames {
		session = append(session, wsStep{fromServer: f.From == "server", text: f.Text})
	}
	var outName string
	{
		var m struct {
			Output struct {
				Data []struct {
					Name string `json:"name"`
				} `json:"data"`
			} `json:"output"`
		}
		json.Unmarshal([]byte(rec.Frames[len(rec.Frames)-1].Text), &m)
		outName = m.Output.Data[0].Name
	}
	rp := &wsReplay{config: config, info: info, sessions: [][]wsStep{session}}
	var uploaded []byte
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		p, ok := strings.CutPrefix(r.URL.Path, "/file=")
		if !ok {
			rp.ServeHTTP(w, r)
			return
		}
		if p != outName {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", rec.Download.ContentType)
		io.WriteString(w, rec.Download.Body)
	})
	mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
		f, _, err := r.FormFile("files")
		if err != nil {
			rp.fail(err)
			http.Error(w, err.Error(), 400)
			return
		}
		uploaded, _ = io.ReadAll(f)
		io.WriteString(w, rec.UploadResponse)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	in := filepath.Join(t.TempDir(), "payload.txt")
	if err := os.WriteFile(in, []byte(rec.Payload), 0o600); err != nil {
		t.Fatal(err)
	}
	c := connect(t, srv.URL)
	defer c.Close()
	ctx := testCtx(t)
	out, err := c.Predict(ctx, "/reverse_file", gradio.File(in))
	if err != nil {
		t.Fatalf("reverse_file: %v", err)
	}
	if string(uploaded) != rec.Payload {
		t.Errorf("uploaded %q, want %q", uploaded, rec.Payload)
	}
	if len(out) != 1 || !gradio.IsFileData(out[0]) {
		t.Fatalf("output %s is not a file", out)
	}
	fd, err := gradio.ParseFileData(out[0])
	if err != nil {
		t.Fatal(err)
	}
	if fd.Path != outName || fd.OrigName != "reversed_payload.txt" || fd.Size == nil || *fd.Size != int64(len(rec.Payload)) {
		t.Errorf("FileData %+v, want path %s, orig_name reversed_payload.txt, size %d", fd, outName, len(rec.Payload))
	}
	var got bytes.Buffer
	if err := c.Download(ctx, fd, &got); err != nil {
		t.Fatal(err)
	}
	if got.String() != rec.Download.Body {
		t.Errorf("downloaded %q, want %q", got.String(), rec.Download.Body)
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for _, err := range rp.errs {
		t.Error(err) // includes a data frame unlike the recorded one
	}
}

func TestGradio3FileURLRefused(t *testing.T) {
	config, info, _ := parseWSTranscript(t)
	rp := &wsReplay{config: config, info: info}
	srv := httptest.NewServer(rp)
	defer srv.Close()
	c := connect(t, srv.URL)
	defer c.Close()
	_, err := c.Predict(testCtx(t), "/reverse_file", gradio.FileURL("https://example.invalid/x.txt"))
	var ae *gradio.ArgumentError
	if !errors.As(err, &ae) || !strings.Contains(ae.Msg, "Gradio 3") {
		t.Fatalf("err %v, want an *ArgumentError about Gradio 3", err)
	}
}

func TestLegacyFileDataShapes(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		file bool
		path string
	}{
		{`{"orig_name":"a.txt","name":"/tmp/gradio/x/a.txt","size":3,"data":null,"is_file":true}`, true, "/tmp/gradio/x/a.txt"},
		{`{"name":"a.txt","data":"data:text/plain;base64,YWJj","is_file":false}`, false, ""},
		{`{"name":"Alice"}`, false, ""},
		{`{"path":"/tmp/x","meta":{"_type":"gradio.FileData"}}`, true, "/tmp/x"},
	} {
		if got := gradio.IsFileData(json.RawMessage(tc.raw)); got != tc.file {
			t.Errorf("IsFileData(%s) = %v, want %v", tc.raw, got, tc.file)
		}
		fd, err := gradio.ParseFileData(json.RawMessage(tc.raw))
		if tc.file && (err != nil || fd.Path != tc.path) {
			t.Errorf("ParseFileData(%s) = %+v, %v; want path %s", tc.raw, fd, err, tc.path)
		}
		if !tc.file && err == nil {
			t.Errorf("ParseFileData(%s) = %+v, want an error", tc.raw, fd)
		}
	}
}
