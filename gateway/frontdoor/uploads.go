package frontdoor

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// uploads keeps uploaded files until the joins that use them.
type uploads struct {
	cfgDir string // configured directory; "" means a temporary one
	home   string // Config.UploadHome: starts every id, "home."
	now    func() time.Time

	dirOnce sync.Once // creates dir on the first upload
	dir     string
	own     bool // dir is ours to remove
	dirErr  error

	mu sync.Mutex // guards m, used, total, maxClient and maxTotal
	// maxClient and maxTotal bound the bytes kept on disk per client and
	// in total (<= 0: no limit).
	maxClient, maxTotal int64
	m                   map[string]*held
	used                map[string]int64 // client -> bytes kept (and being written)
	total               int64
}

type held struct {
	id, name, file string
	client         string // who uploaded it: its bytes count there
	size           int64
	created        time.Time
	mu             sync.Mutex        // guards sent; held while a copy is sent to a replica
	sent           map[string]string // replica -> its path of the file
}

func newUploads(dir, home string, now func() time.Time, maxClient, maxTotal int64) *uploads {
	if home != "" {
		home += "."
	}
	return &uploads{cfgDir: dir, home: home, now: now, maxClient: maxClient, maxTotal: maxTotal, m: map[string]*held{}, used: map[string]int64{}}
}

// Upload quota errors: the client's own bytes on disk, or everyone's.
var (
	errClientQuota = errors.New("client upload quota")
	errTotalQuota  = errors.New("total upload quota")
)

// take counts n more bytes of client, or reports which quota they exceed
// (nothing counted then).
func (u *uploads) take(client string, n int64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.maxClient > 0 && u.used[client]+n > u.maxClient {
		return errClientQuota
	}
	if u.maxTotal > 0 && u.total+n > u.maxTotal {
		return errTotalQuota
	}
	u.used[client] += n
	u.total += n
	return nil
}

// give returns n bytes of client's quota.
func (u *uploads) give(client string, n int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.giveLocked(client, n)
}

func (u *uploads) giveLocked(client string, n int64) {
	if u.used[client] -= n; u.used[client] <= 0 {
		delete(u.used, client)
	}
	u.total -= n
}

// quotaWriter counts what it writes against a client's quota as it goes,
// so that an upload stops at the quota, not after it.
type quotaWriter struct {
	w      io.Writer
	u      *uploads
	client string
	n      int64 // bytes taken
}

func (q *quotaWriter) Write(p []byte) (int, error) {
	if err := q.u.take(q.client, int64(len(p))); err != nil {
		return 0, err
	}
	q.n += int64(len(p))
	return q.w.Write(p)
}

// setQuotas sets the per-client and total bounds (Reconfigure).
func (u *uploads) setQuotas(maxClient, maxTotal int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.maxClient, u.maxTotal = maxClient, maxTotal
}

// bytes is what is kept on disk now, in total.
func (u *uploads) bytes() int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.total
}

func (u *uploads) ensureDir() (string, error) {
	u.dirOnce.Do(func() {
		if u.cfgDir != "" {
			u.dir, u.dirErr = u.cfgDir, os.MkdirAll(u.cfgDir, 0o700)
			return
		}
		u.dir, u.dirErr = os.MkdirTemp("", "gradiopool-uploads-")
		u.own = u.dirErr == nil
	})
	return u.dir, u.dirErr
}

func (u *uploads) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.m)
}

// remove drops the upload at gateway path p (a refused request's).
func (u *uploads) remove(p string) {
	id, _, _ := strings.Cut(strings.TrimPrefix(p, heldPrefix), "/")
	u.mu.Lock()
	h := u.m[id]
	if h != nil {
		delete(u.m, id)
		u.giveLocked(h.client, h.size)
	}
	u.mu.Unlock()
	if h != nil {
		_ = os.Remove(h.file)
	}
}

func (u *uploads) get(id string) *held {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.m[id]
}

// put stores r as a new upload of client named name, at most limit bytes
// (0: no limit) and within the client's and the total quota (the error
// is then errClientQuota or errTotalQuota); it returns the gateway path.
func (u *uploads) put(client, name string, r io.Reader, limit int64) (string, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := u.home + hex.EncodeToString(b[:])
	dir, err := u.ensureDir()
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "up-")
	if err != nil {
		return "", err
	}
	src := r
	if limit > 0 {
		src = io.LimitReader(r, limit+1)
	}
	qw := &quotaWriter{w: f, u: u, client: client}
	n, err := io.Copy(qw, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && limit > 0 && n > limit {
		err = errTooLarge
	}
	if err != nil {
		_ = os.Remove(f.Name())
		u.give(client, qw.n)
		return "", err
	}
	h := &held{id: id, name: name, file: f.Name(), client: client, size: n, created: u.now(), sent: map[string]string{}}
	u.mu.Lock()
	u.m[id] = h
	u.mu.Unlock()
	return heldPrefix + id + "/" + name, nil
}

var errTooLarge = errors.New("too large")

func (u *uploads) sweep(before time.Time) {
	u.mu.Lock()
	var old []*held
	for id, h := range u.m {
		if h.created.Before(before) {
			delete(u.m, id)
			u.giveLocked(h.client, h.size)
			old = append(old, h)
		}
	}
	u.mu.Unlock()
	for _, h := range old {
		_ = os.Remove(h.file)
	}
}

func (u *uploads) close() error {
	u.mu.Lock()
	all := u.m
	u.m = map[string]*held{}
	u.used, u.total = map[string]int64{}, 0
	u.mu.Unlock()
	for _, h := range all {
		_ = os.Remove(h.file)
	}
	u.dirOnce.Do(func() {}) // no directory after close
	if u.own {
		return os.RemoveAll(u.dir)
	}
	return nil
}

// cleanName keeps the base name of an uploaded file, Gradio-like.
func cleanName(n string) string {
	n = filepath.Base(strings.ReplaceAll(n, "\\", "/"))
	n = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(`/\:*?"<>|`, r) {
			return '_'
		}
		return r
	}, n)
	if n == "" || n == "." || n == ".." {
		var b [5]byte
		_, _ = rand.Read(b[:])
		n = "tmp" + hex.EncodeToString(b[:])
	}
	return n
}
