package gradiotest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var unsafeName = regexp.MustCompile(`[^\w.\-]+`)

// sanitizeName mimics Gradio's filename sanitising: a base name without
// path separators or odd characters.
func sanitizeName(name string) string {
	name = filepath.Base(strings.ReplaceAll(name, `\`, "/"))
	name = unsafeName.ReplaceAllString(name, "_")
	if name == "" || name == "." || name == ".." || name == "_" {
		return ""
	}
	return name
}

func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request) {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" {
		detail(w, 400, "Invalid content type.")
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		detail(w, 400, "There was an error parsing the body")
		return
	}
	max := s.knobsNow().MaxFileSize
	var paths []string
	sawPart := false
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) && paths == nil && !sawPart {
			detail(w, 400, "There was an error parsing the body")
			return
		}
		if errors.Is(err, io.EOF) {
			break
		}
		sawPart = true
		if err != nil {
			detail(w, 400, "There was an error parsing the body")
			return
		}
		if part.FormName() != "files" {
			_, _ = io.Copy(io.Discard, part)
			continue
		}
		var src io.Reader = part
		if max > 0 {
			src = io.LimitReader(part, max+1)
		}
		data, err := io.ReadAll(src)
		if err != nil {
			detail(w, 400, "There was an error parsing the body")
			return
		}
		if max > 0 && int64(len(data)) > max {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			fmt.Fprintf(w, "File size exceeded maximum allowed size of %d bytes.", max)
			return
		}
		name := sanitizeName(part.FileName())
		if name == "" {
			name = "tmp" + randHex(5)
		}
		sum := sha256.Sum256(append([]byte(s.cookieID), data...))
		dir := filepath.Join(s.uploadDir, hex.EncodeToString(sum[:]))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			internalError(w, 500)
			return
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			internalError(w, 500)
			return
		}
		paths = append(paths, p)
	}
	if paths == nil {
		paths = []string{}
	}
	writeJSON(w, 200, paths)
}

// allowedFile reports whether path lies inside the upload directory.
func (s *Server) allowedFile(p string) bool {
	if !filepath.IsAbs(p) {
		return false
	}
	clean := filepath.Clean(p)
	if real, err := filepath.EvalSymlinks(clean); err == nil {
		clean = real
	}
	rel, err := filepath.Rel(s.uploadDir, clean)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}

var inlineTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true,
	"audio/mpeg": true, "audio/wav": true, "audio/ogg": true, "video/mp4": true, "video/webm": true, "text/plain": true}

func (s *Server) handleFile(w http.ResponseWriter, r *http.Request, raw string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w)
		return
	}
	p := raw // r.URL.Path is already unescaped
	if !s.allowedFile(p) {
		detail(w, http.StatusForbidden, "File not allowed: "+p+".")
		return
	}
	f, err := os.Open(p)
	if err != nil {
		notFound(w)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.IsDir() {
		notFound(w)
		return
	}
	name := filepath.Base(p)
	ct := mime.TypeByExtension(filepath.Ext(name))
	if i := strings.Index(ct, ";"); i >= 0 {
		ct = ct[:i]
	}
	if inlineTypes[ct] {
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Disposition", fmt.Sprintf("inline; filename=%q", name))
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	}
	w.Header().Set("Accept-Ranges", "bytes")
	http.ServeContent(w, r, name, st.ModTime(), f)
}
