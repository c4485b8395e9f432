package frontdoor

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/gradio"

	"github.com/gradiopool/gradiopool/internal/jsonwalk"
	"github.com/gradiopool/gradiopool/internal/uploadstore"
)

// heldPrefix starts the paths the gateway answers for its uploads; a join
// whose data names one gets the file sent to its replica first.
const heldPrefix = "/gradiopool-upload/"

// uploadPrefix starts the ids of this gateway's uploads: the cluster's
// gateways each have a home (Config.UploadHome), so that a join at another
// gateway knows where to fetch an upload it names.
func uploadPrefix(home string) string {
	if home == "" {
		return ""
	}
	return home + "."
}

// heldID is the upload id in gateway path p (heldPrefix + id + "/" + name).
func heldID(p string) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(p, heldPrefix), "/")
	return id
}

// filePrefix starts the virtual paths of replica files handed out by the
// gateway: /gradiopool/{replica index}/{signature}{replica path}.
const filePrefix = "/gradiopool/"

// handleUpload is POST upload: multipart parts named "files"; the answer
// is a JSON list of paths, one per part, like Gradio's. The files stay
// here until a join uses them.
func (f *FrontDoor) handleUpload(w http.ResponseWriter, r *http.Request) {
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" || params["boundary"] == "" {
		detail(w, http.StatusBadRequest, "the upload must be multipart/form-data with parts named files")
		return
	}
	f.start()
	limit := f.conf().MaxFileBytes
	if limit == 0 {
		// Gradio's own bound for the app, else the gateway's body bound.
		limit = f.conf().MaxBodyBytes
		if app, _, err := f.reference(r.Context()); err == nil && app.Config().MaxFileSize > 0 {
			limit = app.Config().MaxFileSize
		}
	}
	client := f.clientID(r)
	mr := multipart.NewReader(r.Body, params["boundary"])
	var paths []string
	ok := false
	defer func() {
		if !ok { // all or nothing: a refused request keeps no file
			for _, p := range paths {
				f.ups.Remove(heldID(p))
			}
		}
	}()
	for parts := 0; ; parts++ {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			detail(w, http.StatusBadRequest, "malformed multipart body: "+err.Error())
			return
		}
		if f.conf().MaxFilesPerUpload > 0 && parts >= f.conf().MaxFilesPerUpload {
			_ = part.Close()
			detail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("gradiopool: at most %d files per upload request (frontdoor.max_files_per_upload)", f.conf().MaxFilesPerUpload))
			return
		}
		if part.FormName() != "files" {
			_ = part.Close()
			continue
		}
		up, err := f.ups.Put(client, uploadstore.CleanName(part.FileName()), part, limit)
		_ = part.Close()
		switch {
		case errors.Is(err, uploadstore.ErrTooLarge):
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			_, _ = fmt.Fprintf(w, "File size exceeded maximum allowed size of %d bytes.", limit)
			return
		case errors.Is(err, uploadstore.ErrClientQuota):
			w.Header().Set("Retry-After", strconv.Itoa(int(f.conf().UploadTTL/time.Second)))
			detail(w, http.StatusTooManyRequests, fmt.Sprintf("gradiopool: this client's uploads kept take %d bytes already (frontdoor.max_upload_bytes_per_client); they expire %s after their upload", f.conf().MaxUploadBytesPerClient, f.conf().UploadTTL))
			return
		case errors.Is(err, uploadstore.ErrTotalQuota):
			detail(w, http.StatusServiceUnavailable, "gradiopool: the gateway's upload space is full (frontdoor.max_upload_bytes); retry later")
			return
		case err != nil:
			detail(w, http.StatusInternalServerError, "storing the upload: "+err.Error())
			return
		}
		paths = append(paths, heldPrefix+up.ID+"/"+up.Name)
	}
	ok = true
	b, _ := json.Marshal(paths)
	relayed(http.StatusOK, "application/json", b).writeTo(w)
}

// ErrUploadNotFound is an upload no front door of the cluster keeps (never
// made, expired, or its gateway gone).
var ErrUploadNotFound = errors.New("frontdoor: upload not found")

// OpenUpload opens upload id kept here, for another gateway of the
// cluster whose join names it (Config.FetchUpload there).
func (f *FrontDoor) OpenUpload(id string) (io.ReadCloser, error) {
	r, err := f.ups.Open(id)
	if err != nil {
		return nil, ErrUploadNotFound
	}
	return r, nil
}

// fetchedUpload sends upload id (path p), kept by another gateway of the
// cluster, to app: the upload reached another gateway than the join.
func (f *FrontDoor) fetchedUpload(ctx context.Context, app *gradio.Client, p, id string) (string, bool, error) {
	unknown := &badFileError{msg: "gradiopool: the upload " + p + " is unknown or expired; upload it again"}
	home, _, ok := strings.Cut(id, ".")
	if !ok || f.conf().FetchUpload == nil || home == f.conf().UploadHome {
		return "", false, unknown
	}
	rc, err := f.conf().FetchUpload(ctx, home, id)
	if errors.Is(err, ErrUploadNotFound) {
		return "", false, unknown
	}
	if err != nil {
		f.log.Warn("front door: an upload kept by another gateway could not be fetched", slog.Any("error", err))
		return "", false, unknown
	}
	defer rc.Close()
	name := path.Base(p)
	fd, err := app.Upload(ctx, name, rc)
	if err != nil {
		return "", false, err
	}
	return fd.Path, true, nil
}

// badFileError is a file reference the caller may not use.
type badFileError struct{ msg string }

func (e *badFileError) Error() string { return e.msg }

// localizeFiles rewrites the paths of FileData in a join's data for the
// replica: held uploads are sent there first (once), files handed out by
// the gateway become that replica's paths again (copied when they live on
// another replica). Data without such paths is returned unchanged.
func (f *FrontDoor) localizeFiles(ctx context.Context, app *gradio.Client, replica string, data json.RawMessage) (json.RawMessage, error) {
	if !bytes.Contains(data, []byte(heldPrefix)) && !bytes.Contains(data, []byte(filePrefix)) {
		return data, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &badFileError{msg: "data is not JSON: " + err.Error()}
	}
	var werr error
	v, _ = jsonwalk.Replace(v, func(t map[string]any) (any, bool) {
		if p, ok := t["path"].(string); ok && werr == nil {
			np, changed, err := f.localPath(ctx, app, replica, p)
			if err != nil {
				werr = err
			} else if changed {
				t["path"] = np
				if _, ok := t["url"]; ok {
					t["url"] = nil
				}
			}
		}
		return nil, false // rewritten in place; its members are walked too
	})
	if werr != nil {
		return nil, werr
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// localPath maps one path for replica.
func (f *FrontDoor) localPath(ctx context.Context, app *gradio.Client, replica, p string) (string, bool, error) {
	switch {
	case strings.HasPrefix(p, heldPrefix):
		id := heldID(p)
		h := f.ups.Get(id)
		if h == nil {
			return f.fetchedUpload(ctx, app, p, id)
		}
		rp, err := h.SendOnce(ctx, replica, func(r io.Reader) (string, error) {
			fd, err := app.Upload(ctx, h.Name, r)
			if err != nil {
				return "", err
			}
			return fd.Path, nil
		})
		if errors.Is(err, uploadstore.ErrNotFound) {
			return "", false, &badFileError{msg: "gradiopool: the upload " + p + " is gone; upload it again"}
		}
		if err != nil {
			return "", false, err
		}
		return rp, true, nil
	case strings.HasPrefix(p, filePrefix):
		idx, orig, ok := f.verifyFile(p)
		if !ok {
			return "", false, &badFileError{msg: "gradiopool: file not allowed: " + p}
		}
		owner, _ := f.replicaAt(idx) // verifyFile checked idx
		if owner == replica {
			return orig, true, nil
		}
		// A file of another replica: copy it over.
		src, err := f.appFor(ctx, owner)
		if err != nil {
			return "", false, err
		}
		req, err := src.NewRequest(ctx, http.MethodGet, fileURL(src, orig), nil)
		if err != nil {
			return "", false, err
		}
		resp, err := src.Do(req, true)
		if err != nil {
			return "", false, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", false, &badFileError{msg: fmt.Sprintf("gradiopool: file %s: replica answered %d", p, resp.StatusCode)}
		}
		fd, err := app.Upload(ctx, path.Base(orig), resp.Body)
		if err != nil {
			return "", false, err
		}
		return fd.Path, true, nil
	}
	return p, false, nil
}

// sign is the capability of replica index idx's file p.
func (f *FrontDoor) sign(idx int, p string) string {
	exp := int64(0) // never
	if ttl := f.conf().FileURLTTL; ttl > 0 {
		// Rounded up to the minute: the URLs of one file are the same
		// for a minute (caches), and live between ttl and ttl + 1 min.
		exp = (f.conf().Now().Add(ttl).Unix() + 59) / 60 * 60
	}
	e := strconv.FormatInt(exp, 36)
	return e + "." + f.mac(idx, e, p)
}

// mac is the signature of replica idx's file p until expiry e (base 36).
func (f *FrontDoor) mac(idx int, e, p string) string {
	m := hmac.New(sha256.New, f.conf().HashKey)
	m.Write([]byte("file\x00" + strconv.Itoa(idx) + "\x00" + e + "\x00" + p))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// virtualPath is the gateway path of replica idx's file p.
func (f *FrontDoor) virtualPath(idx int, p string) string {
	return filePrefix + strconv.Itoa(idx) + "/" + f.sign(idx, p) + p
}

// verifyFile checks a virtual path and returns the replica index and its
// path there.
func (f *FrontDoor) verifyFile(vp string) (int, string, bool) {
	rest, ok := strings.CutPrefix(vp, filePrefix)
	if !ok {
		return 0, "", false
	}
	is, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, "", false
	}
	sig, p, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, "", false
	}
	p = "/" + p
	idx, err := strconv.Atoi(is)
	if _, known := f.replicaAt(idx); err != nil || !known || strconv.Itoa(idx) != is {
		return 0, "", false
	}
	e, mac, ok := strings.Cut(sig, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(f.mac(idx, e, p))) {
		return 0, "", false
	}
	exp, err := strconv.ParseInt(e, 36, 64)
	if err != nil || (exp != 0 && !f.conf().Now().Before(time.Unix(exp, 0))) {
		return 0, "", false // expired (Config.FileURLTTL)
	}
	return idx, p, true
}

// fileURL is the replica URL of its file p.
func fileURL(app *gradio.Client, p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return app.URL("file=" + strings.Join(segs, "/"))
}

// handleFile is GET/HEAD file=/{path} (and the file/ alias): only the
// virtual paths the gateway handed out, streamed from their replica.
func (f *FrontDoor) handleFile(w http.ResponseWriter, r *http.Request) {
	vp := "/" + r.PathValue("path")
	idx, p, ok := f.verifyFile(vp)
	if !ok {
		detail(w, http.StatusForbidden, "File not allowed: "+vp)
		return
	}
	owner, _ := f.replicaAt(idx) // verifyFile checked idx
	app, err := f.appFor(r.Context(), owner)
	if err != nil {
		detail(w, http.StatusBadGateway, "gradiopool: "+err.Error())
		return
	}
	req, err := app.NewRequest(r.Context(), r.Method, fileURL(app, p), nil)
	if err != nil {
		detail(w, http.StatusInternalServerError, err.Error())
		return
	}
	for _, h := range []string{"Range", "If-Range", "If-None-Match", "If-Modified-Since"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	f.callerHeaders(r, req.Header)
	resp, err := app.Do(req, true)
	if err != nil {
		detail(w, http.StatusBadGateway, "gradiopool: download: "+err.Error())
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Disposition", "Content-Range", "Accept-Ranges", "Etag", "Last-Modified"} { // not Cache-Control: the gateway's no-store stands
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// rewriter rewrites the file URLs and paths of one replica's messages.
type rewriter struct {
	f   *FrontDoor
	idx int
	re  *regexp.Regexp
	gw  string
	pre string
}

// rewriter returns the rewriter of app's messages for a caller that
// reached the gateway at root gw.
func (f *FrontDoor) rewriter(app *gradio.Client, replica, gw string) *rewriter {
	return f.newRewriter(appRoots(app), f.replicaIndex(replica), gw, f.callerPrefix())
}

func (f *FrontDoor) newRewriter(roots []string, idx int, gw, prefix string) *rewriter {
	alts := make([]string, len(roots))
	for i, r := range roots {
		alts[i] = regexp.QuoteMeta(r)
	}
	re := regexp.MustCompile(`"url":\s*"(?:` + strings.Join(alts, "|") + `)(?:/gradio_api)?/file=((?:[^"\\]|\\.)*)"`)
	return &rewriter{f: f, idx: idx, re: re, gw: gw, pre: prefix}
}

// rewrite returns rec with each output file's url and path pointing at the
// gateway; other bytes are untouched (field order and values intact).
func (rw *rewriter) rewrite(rec []byte) []byte {
	if rw.idx < 0 || !bytes.Contains(rec, []byte("/file=")) {
		return rec
	}
	var paths []string
	out := rw.re.ReplaceAllFunc(rec, func(m []byte) []byte {
		sub := rw.re.FindSubmatch(m)
		var raw string
		if err := json.Unmarshal(append(append([]byte{'"'}, sub[1]...), '"'), &raw); err != nil {
			return m
		}
		p := raw
		if u, err := url.PathUnescape(raw); err == nil {
			p = u
		}
		if !strings.HasPrefix(p, "/") {
			return m
		}
		paths = append(paths, p)
		vp := rw.f.virtualPath(rw.idx, p)
		return append([]byte(`"url":`), jsonString(rw.gw+rw.pre+"/file="+vp)...)
	})
	for _, p := range paths {
		vp := jsonString(rw.f.virtualPath(rw.idx, p))
		old := jsonString(p)
		out = bytes.ReplaceAll(out, append([]byte(`"path":`), old...), append([]byte(`"path":`), vp...))
		out = bytes.ReplaceAll(out, append([]byte(`"path": `), old...), append([]byte(`"path": `), vp...))
	}
	return out
}

func jsonString(s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimRight(buf.Bytes(), "\n")
}
