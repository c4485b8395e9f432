package gradio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// FileData is Gradio's file object, in inputs and outputs
// (gradio.data_classes.FileData).
type FileData struct {
	Path     string `json:"path"`
	URL      string `json:"url,omitempty"`
	Size     *int64 `json:"size,omitempty"`
	OrigName string `json:"orig_name,omitempty"`
	MimeType string `json:"mime_type,omitempty"`
	IsStream bool   `json:"is_stream,omitempty"`
	Meta     *Meta  `json:"meta,omitempty"`
}

// Meta is FileData's meta field; inputs must carry Type "gradio.FileData".
type Meta struct {
	Type string `json:"_type"`
}

// fileDataMeta is the marker every input file needs (sse_v2.1+).
var fileDataMeta = &Meta{Type: "gradio.FileData"}

// ParseFileData decodes one output value as FileData. It accepts objects
// with a string "path" (with or without meta, as outputs of Gradio 4.x-6.x
// have), Gradio 3's file dicts ({"name": path, "is_file": true, ...}) and
// reports an error for anything else.
func ParseFileData(raw json.RawMessage) (FileData, error) {
	var fd FileData
	if err := json.Unmarshal(raw, &fd); err != nil {
		return FileData{}, fmt.Errorf("gradio: not a FileData: %w", err)
	}
	if fd.Path == "" && fd.URL == "" {
		if lf, ok := legacyFileData(raw); ok {
			return lf, nil
		}
		return FileData{}, errors.New("gradio: not a FileData: no path")
	}
	return fd, nil
}

// IsFileData reports whether raw is a JSON object that looks like FileData
// (has a string "path" and, if meta is present, meta._type
// "gradio.FileData") or like Gradio 3's file dict ("name" and "is_file"
// true).
func IsFileData(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return false
	}
	var probe struct {
		Path *string `json:"path"`
		Meta *Meta   `json:"meta"`
	}
	if json.Unmarshal(raw, &probe) != nil {
		return false
	}
	if probe.Path == nil {
		_, ok := legacyFileData(raw)
		return ok
	}
	return probe.Meta == nil || probe.Meta.Type == "gradio.FileData"
}

// Upload is a file argument: a local path, a reader or a URL. The client
// uploads local data (POST {prefix}/upload, multipart field "files") and
// sends FileData in its place; a URL is sent as FileData for the server to
// fetch. Upload values may appear at any depth of an argument built from
// []any and map[string]any (multi-file components, image editors).
type Upload struct {
	path string
	name string
	r    io.Reader
	url  string
}

// File is a local file argument.
func File(path string) Upload { return Upload{path: path, name: filepath.Base(path)} }

// FileReader is a file argument read from r (consumed once) and uploaded
// under the given name.
func FileReader(name string, r io.Reader) Upload { return Upload{name: name, r: r} }

// FileURL is a file argument the server downloads itself (http(s) URL).
func FileURL(u string) Upload {
	name := u
	if pu, err := url.Parse(u); err == nil {
		name = path.Base(pu.Path)
	}
	return Upload{url: u, name: name}
}

// prepareArgs replaces Upload values (at any depth of []any /
// map[string]any) with FileData, uploading local data, and adds meta to
// FileData values given by the caller. changed reports whether anything was
// replaced, so unchanged containers are not copied.
func (s *appSession) prepareArgs(ctx context.Context, endpoint string, v any) (out any, changed bool, err error) {
	switch x := v.(type) {
	case Upload:
		fd, err := s.uploadArg(ctx, endpoint, x)
		return fd, true, err
	case *Upload:
		if x == nil {
			return nil, true, nil
		}
		fd, err := s.uploadArg(ctx, endpoint, *x)
		return fd, true, err
	case FileData:
		if x.Meta == nil {
			x.Meta = fileDataMeta
		}
		return x, true, nil
	case *FileData:
		if x == nil {
			return nil, true, nil
		}
		c := *x
		if c.Meta == nil {
			c.Meta = fileDataMeta
		}
		return c, true, nil
	case []Upload:
		out := make([]any, len(x))
		for i, e := range x {
			fd, err := s.uploadArg(ctx, endpoint, e)
			if err != nil {
				return nil, true, err
			}
			out[i] = fd
		}
		return out, true, nil
	case []any:
		var out []any
		for i, e := range x {
			n, ch, err := s.prepareArgs(ctx, endpoint, e)
			if err != nil {
				return nil, true, err
			}
			if ch && out == nil {
				out = append(make([]any, 0, len(x)), x[:i]...)
			}
			if out != nil {
				out = append(out, n)
			}
		}
		if out == nil {
			return x, false, nil
		}
		return out, true, nil
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			n, ch, err := s.prepareArgs(ctx, endpoint, e)
			if err != nil {
				return nil, true, err
			}
			if ch && out == nil {
				out = make(map[string]any, len(x))
				for kk, vv := range x {
					out[kk] = vv
				}
			}
			if out != nil {
				out[k] = n
			}
		}
		if out == nil {
			return x, false, nil
		}
		return out, true, nil
	}
	return v, false, nil
}

func (s *appSession) uploadArg(ctx context.Context, endpoint string, u Upload) (FileData, error) {
	if u.url != "" {
		return FileData{Path: u.url, OrigName: u.name, Meta: fileDataMeta}, nil
	}
	r, size := u.r, int64(-1)
	if u.path != "" {
		f, err := os.Open(u.path)
		if err != nil {
			return FileData{}, &ArgumentError{Endpoint: endpoint, Msg: "cannot open file argument", Err: err}
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			size = st.Size()
		}
		r = f
	} else if r == nil {
		return FileData{}, &ArgumentError{Endpoint: endpoint, Msg: "empty file argument"}
	} else if l, ok := r.(interface{ Len() int }); ok {
		size = int64(l.Len())
	}
	paths, err := s.app.upload(ctx, []uploadPart{{name: u.name, r: r, size: size}})
	if err != nil {
		return FileData{}, err
	}
	fd := FileData{Path: paths[0], OrigName: u.name, Meta: fileDataMeta}
	if size >= 0 {
		fd.Size = &size
	}
	return fd, nil
}

type uploadPart struct {
	name string
	r    io.Reader
	size int64 // -1 unknown
}

// Upload uploads data from r under name and returns the FileData to pass
// as an argument (useful to send the same file to several calls).
func (c *Client) Upload(ctx context.Context, name string, r io.Reader) (FileData, error) {
	return c.sess.uploadArg(ctx, "upload", FileReader(name, r))
}

// limitedReader fails with *UploadTooLargeError once more than max bytes
// were read, so readers of unknown size respect max_file_size too.
type limitedReader struct {
	r    io.Reader
	n    int64 // bytes left before the limit is exceeded
	name string
	max  int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n, &UploadTooLargeError{Name: l.name, Size: -1, Max: l.max}
	}
	return n, err
}

// upload sends files in one multipart request and returns the server paths.
func (a *app) upload(ctx context.Context, parts []uploadPart) ([]string, error) {
	max := a.cfg.MaxFileSize
	for _, p := range parts {
		if max > 0 && p.size > max {
			return nil, &UploadTooLargeError{Name: p.name, Size: p.size, Max: max}
		}
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		var err error
		for _, p := range parts {
			var w io.Writer
			w, err = mw.CreateFormFile("files", p.name)
			if err != nil {
				break
			}
			r := p.r
			if max > 0 {
				r = &limitedReader{r: r, n: max, name: p.name, max: max}
			}
			if _, err = io.Copy(w, r); err != nil {
				break
			}
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, err := a.newRequest(ctx, http.MethodPost, a.api("upload"), pr)
	if err != nil {
		pr.Close()
		return nil, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := a.do(req, true)
	pr.Close()
	if err != nil {
		var tl *UploadTooLargeError
		if errors.As(err, &tl) {
			return nil, tl
		}
		return nil, &ConnectionLostError{Err: fmt.Errorf("upload: %w", err)}
	}
	body, err := a.readBody(resp)
	if err != nil {
		return nil, &ConnectionLostError{Err: fmt.Errorf("upload: %w", err)}
	}
	if resp.StatusCode == http.StatusRequestEntityTooLarge {
		m := max
		if m <= 0 {
			m = -1
		}
		name := ""
		if len(parts) == 1 {
			name = parts[0].name
		}
		return nil, &UploadTooLargeError{Name: name, Size: -1, Max: m}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &ProtocolError{Op: "upload", StatusCode: resp.StatusCode, Body: excerpt(body)}
	}
	var paths []string
	if err := json.Unmarshal(body, &paths); err != nil || len(paths) != len(parts) {
		return nil, &ProtocolError{Op: "upload", Body: excerpt(body), Err: fmt.Errorf("want a list of %d paths", len(parts))}
	}
	return paths, nil
}

// Download writes the content of an output file to w. It fetches
// {base}{prefix}/file={path} (as the Python client does, ignoring a url the
// server may have computed from a wrong root), or the URL itself for
// streams and files the app returned by external URL. Auth headers are
// sent only to the app's own host.
func (c *Client) Download(ctx context.Context, fd FileData, w io.Writer) error {
	a := c.app
	var u string
	switch {
	case fd.IsStream && fd.URL != "":
		u = fd.URL
	case strings.HasPrefix(fd.Path, "http://") || strings.HasPrefix(fd.Path, "https://"):
		u = fd.Path
	case fd.Path != "":
		u = a.api("file=" + fd.Path)
	case fd.URL != "":
		u = fd.URL
	default:
		return errors.New("gradio: download: FileData has no path or url")
	}
	req, err := a.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if !sameHost(u, a.base) {
		req.Header.Del("Authorization")
		for k := range a.set.headers {
			req.Header.Del(k)
		}
		req.Header.Del("Cookie")
	}
	resp, err := a.do(req, true)
	if err != nil {
		return &ConnectionLostError{Err: fmt.Errorf("download: %w", err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &ProtocolError{Op: "download", StatusCode: resp.StatusCode, Body: excerpt(b)}
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("gradio: download: %w", err)
	}
	return nil
}

func sameHost(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	return err1 == nil && err2 == nil && strings.EqualFold(ua.Host, ub.Host) && ua.Scheme == ub.Scheme
}
