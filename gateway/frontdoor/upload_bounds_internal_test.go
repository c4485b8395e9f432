package frontdoor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// uploadReq is a multipart upload of files (name -> size) as client.
func uploadReq(t *testing.T, client string, sizes ...int) *http.Request {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for i, n := range sizes {
		w, err := mw.CreateFormFile("files", fmt.Sprintf("f%d.bin", i))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write(bytes.Repeat([]byte{'x'}, n))
	}
	_ = mw.Close()
	r := httptest.NewRequest(http.MethodPost, "/gradio_api/upload", &body)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	r.Header.Set("X-Test-Client", client)
	return r
}

// TestUploadBounds tries to exceed each upload bound: bytes per file
// (413), parts per request (413, nothing kept), bytes on disk per client
// (429 with Retry-After) and in total (503 with Retry-After); past the
// upload TTL the files are removed from disk and their bytes count no
// more. (issue 20 "Why" 4)
func TestUploadBounds(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	f := newTestDoor(t, Config{
		Now: clk.now, UploadDir: dir, UploadTTL: time.Hour,
		MaxFileBytes: 1000, MaxFilesPerUpload: 3, MaxUploadBytesPerClient: 2500, MaxUploadBytes: 4000,
		ClientID: func(r *http.Request) string { return r.Header.Get("X-Test-Client") },
	})
	do := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		f.handleUpload(w, r)
		return w
	}
	files := func() int {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	if w := do(uploadReq(t, "a", 1001)); w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("file of 1001 bytes over max 1000: %d %s, want 413", w.Code, w.Body)
	}
	if w := do(uploadReq(t, "a", 10, 10, 10, 10)); w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "detail") {
		t.Fatalf("4 parts over max 3: %d %s, want 413 {\"detail\": ...}", w.Code, w.Body)
	}
	if n, st := files(), f.Stats(); n != 0 || st.Uploads != 0 || st.UploadBytes != 0 {
		t.Fatalf("after refused uploads: %d files on disk, stats %d uploads %d bytes; want none", n, st.Uploads, st.UploadBytes)
	}
	if w := do(uploadReq(t, "a", 1000, 1000)); w.Code != http.StatusOK {
		t.Fatalf("2 x 1000 bytes: %d %s", w.Code, w.Body)
	}
	w := do(uploadReq(t, "a", 400, 400)) // 2800 > 2500
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("client past its quota: %d Retry-After %q %s, want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if w := do(uploadReq(t, "b", 1000, 1000)); w.Code != http.StatusOK {
		t.Fatalf("client b, 2 x 1000 bytes: %d %s", w.Code, w.Body)
	}
	w = do(uploadReq(t, "c", 10, 1000)) // total 4010 > 4000
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("past the total: %d Retry-After %q %s, want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if n, st := files(), f.Stats(); n != 4 || st.Uploads != 4 || st.UploadBytes != 4000 {
		t.Fatalf("kept: %d files on disk, stats %d uploads %d bytes; want 4 files, 4000 bytes", n, st.Uploads, st.UploadBytes)
	}

	clk.add(61 * time.Minute)
	f.sweep()
	if n, st := files(), f.Stats(); n != 0 || st.Uploads != 0 || st.UploadBytes != 0 {
		t.Fatalf("past the TTL: %d files on disk, stats %d uploads %d bytes; want none", n, st.Uploads, st.UploadBytes)
	}
	w = do(uploadReq(t, "a", 1000, 1000))
	var paths []string
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &paths) != nil || len(paths) != 2 {
		t.Fatalf("after the TTL, the quota is free again: %d %s", w.Code, w.Body)
	}
}

// TestFileURLsExpire: a signed file URL works until Config.FileURLTTL
// (rounded up to the minute) has passed, then no more; a forged expiry
// breaks the signature; a negative TTL never expires. (issue 20 item 4)
func TestFileURLsExpire(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := newTestDoor(t, Config{HashKey: []byte("k"), Now: clk.now, FileURLTTL: time.Hour})
	f.fileIDs = []string{"a"}
	vp := f.virtualPath(0, "/tmp/gradio/f.bin")
	clk.add(59 * time.Minute)
	if _, _, ok := f.verifyFile(vp); !ok {
		t.Fatalf("refused before its TTL: %s", vp)
	}
	// Moving the expiry later breaks the signature.
	exp, _, _ := strings.Cut(strings.TrimPrefix(vp, "/gradiopool/0/"), ".")
	forged := strings.Replace(vp, "/"+exp+".", "/"+strconv.FormatInt(clk.now().Add(24*time.Hour).Unix(), 36)+".", 1)
	if _, _, ok := f.verifyFile(forged); ok {
		t.Fatalf("a forged expiry was accepted: %s", forged)
	}
	clk.add(2 * time.Minute)
	if _, _, ok := f.verifyFile(vp); ok {
		t.Fatalf("accepted past its TTL: %s", vp)
	}

	never := newTestDoor(t, Config{HashKey: []byte("k"), Now: clk.now, FileURLTTL: -1})
	never.fileIDs = []string{"a"}
	vp = never.virtualPath(0, "/tmp/gradio/f.bin")
	clk.add(365 * 24 * time.Hour)
	if _, _, ok := never.verifyFile(vp); !ok {
		t.Fatalf("FileURLTTL < 0: refused after a year: %s", vp)
	}
}
