// Package uploadstore keeps uploaded files on disk until they are used:
// each under a random id, bounded in bytes per client and in total, swept
// by age, and sent to each destination once.
//
// The front door keeps a caller's uploads here because Gradio's uploads
// carry no session: the replica a file must reach is known only when a
// later join names it.
package uploadstore

import (
	"context"
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

// Errors of Put: the file's own bound, the client's bytes kept, everyone's.
var (
	ErrTooLarge    = errors.New("uploadstore: file too large")
	ErrClientQuota = errors.New("uploadstore: client upload quota")
	ErrTotalQuota  = errors.New("uploadstore: total upload quota")
)

// ErrNotFound is an id the store does not keep (never stored, swept,
// removed), or whose file went from the disk.
var ErrNotFound = errors.New("uploadstore: upload not found")

// Store keeps uploaded files. The zero value is not usable: see New.
type Store struct {
	cfgDir string // configured directory; "" means a temporary one
	prefix string // starts every id
	now    func() time.Time

	dirOnce sync.Once // creates dir on the first upload
	dir     string
	own     bool // dir is ours to remove
	dirErr  error

	mu sync.Mutex // guards the fields below; no I/O under it
	// maxClient and maxTotal bound the bytes kept on disk per client and
	// in total (<= 0: no limit).
	maxClient, maxTotal int64
	files               map[string]*File
	used                map[string]int64 // client -> bytes kept (and being written)
	total               int64
}

// File is one kept upload.
type File struct {
	ID   string // the store's id
	Name string // the uploaded name, cleaned (CleanName)

	path    string // on disk
	client  string // who uploaded it: its bytes count there
	size    int64
	created time.Time

	mu   sync.Mutex              // guards sent; never held while a copy is sent
	sent map[string]*replicaCopy // destination -> its copy, sent or being sent
}

// replicaCopy is a file's copy at one destination: done is closed once its send
// ended, with name set on success (a failed copy is forgotten).
type replicaCopy struct {
	done chan struct{}
	name string
}

// New returns a store keeping its files in dir ("" a temporary directory,
// removed by Close), made on the first Put. Ids start with prefix (a
// cluster's gateways give each its own); now is the clock of Sweep.
func New(dir, prefix string, now func() time.Time, maxClient, maxTotal int64) *Store {
	return &Store{cfgDir: dir, prefix: prefix, now: now, maxClient: maxClient, maxTotal: maxTotal,
		files: map[string]*File{}, used: map[string]int64{}}
}

// SetQuotas sets the per-client and total bounds (<= 0: no limit).
func (s *Store) SetQuotas(maxClient, maxTotal int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxClient, s.maxTotal = maxClient, maxTotal
}

// take counts n more bytes of client, or reports which quota they exceed
// (nothing counted then).
func (s *Store) take(client string, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxClient > 0 && s.used[client]+n > s.maxClient {
		return ErrClientQuota
	}
	if s.maxTotal > 0 && s.total+n > s.maxTotal {
		return ErrTotalQuota
	}
	s.used[client] += n
	s.total += n
	return nil
}

// give returns n bytes of client's quota; s.mu is held.
func (s *Store) giveLocked(client string, n int64) {
	if s.used[client] -= n; s.used[client] <= 0 {
		delete(s.used, client)
	}
	s.total -= n
}

// quotaWriter counts what it writes against a client's quota as it goes,
// so that an upload stops at the quota, not after it.
type quotaWriter struct {
	w      io.Writer
	s      *Store
	client string
	n      int64 // bytes taken
}

func (q *quotaWriter) Write(p []byte) (int, error) {
	if err := q.s.take(q.client, int64(len(p))); err != nil {
		return 0, err
	}
	q.n += int64(len(p))
	return q.w.Write(p)
}

// Bytes is what is kept on disk now, in total.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Count is how many files are kept.
func (s *Store) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.files)
}

func (s *Store) ensureDir() (string, error) {
	s.dirOnce.Do(func() {
		if s.cfgDir != "" {
			s.dir, s.dirErr = s.cfgDir, os.MkdirAll(s.cfgDir, 0o700)
			return
		}
		s.dir, s.dirErr = os.MkdirTemp("", "gradiopool-uploads-")
		s.own = s.dirErr == nil
	})
	return s.dir, s.dirErr
}

// Put stores r as a new upload of client named name, at most limit bytes
// (0: no limit; past it ErrTooLarge) and within the client's and the
// total quota (ErrClientQuota, ErrTotalQuota); on an error nothing is
// kept.
func (s *Store) Put(client, name string, r io.Reader, limit int64) (*File, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := s.prefix + hex.EncodeToString(b[:])
	dir, err := s.ensureDir()
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "up-")
	if err != nil {
		return nil, err
	}
	src := r
	if limit > 0 {
		src = io.LimitReader(r, limit+1)
	}
	qw := &quotaWriter{w: f, s: s, client: client}
	n, err := io.Copy(qw, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && limit > 0 && n > limit {
		err = ErrTooLarge
	}
	if err != nil {
		_ = os.Remove(f.Name())
		s.mu.Lock()
		s.giveLocked(client, qw.n)
		s.mu.Unlock()
		return nil, err
	}
	h := &File{ID: id, Name: name, path: f.Name(), client: client, size: n, created: s.now(), sent: map[string]*replicaCopy{}}
	s.mu.Lock()
	s.files[id] = h
	s.mu.Unlock()
	return h, nil
}

// Get returns the file of id, nil when none is kept.
func (s *Store) Get(id string) *File {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.files[id]
}

// Open opens the file of id for reading (ErrNotFound when none is kept).
func (s *Store) Open(id string) (io.ReadCloser, error) {
	h := s.Get(id)
	if h == nil {
		return nil, ErrNotFound
	}
	file, err := os.Open(h.path)
	if err != nil {
		return nil, ErrNotFound // swept meanwhile
	}
	return file, nil
}

// Remove drops the file of id (a refused request's).
func (s *Store) Remove(id string) {
	s.mu.Lock()
	h := s.files[id]
	if h != nil {
		delete(s.files, id)
		s.giveLocked(h.client, h.size)
	}
	s.mu.Unlock()
	if h != nil {
		_ = os.Remove(h.path)
	}
}

// Sweep drops the files stored before before.
func (s *Store) Sweep(before time.Time) {
	s.mu.Lock()
	var old []*File
	for id, h := range s.files {
		if h.created.Before(before) {
			delete(s.files, id)
			s.giveLocked(h.client, h.size)
			old = append(old, h)
		}
	}
	s.mu.Unlock()
	for _, h := range old {
		_ = os.Remove(h.path)
	}
}

// Close drops every file, and the directory when it was a temporary one.
func (s *Store) Close() error {
	s.mu.Lock()
	all := s.files
	s.files = map[string]*File{}
	s.used, s.total = map[string]int64{}, 0
	s.mu.Unlock()
	for _, h := range all {
		_ = os.Remove(h.path)
	}
	s.dirOnce.Do(func() {}) // no directory after close
	if s.own {
		return os.RemoveAll(s.dir)
	}
	return nil
}

// SendOnce returns the name the file has at dest, sending it there with
// send (which reads the file and answers that name) the first time: one
// send per destination, whatever joins name the file at once; the others
// wait for it until their ctx ends, and try themselves if it failed.
// Sends to other destinations do not wait. ErrNotFound when the file went
// from the disk (swept meanwhile).
func (h *File) SendOnce(ctx context.Context, dest string, send func(io.Reader) (string, error)) (string, error) {
	for {
		h.mu.Lock()
		c := h.sent[dest]
		mine := c == nil
		if mine {
			c = &replicaCopy{done: make(chan struct{})}
			h.sent[dest] = c
		}
		h.mu.Unlock()
		if mine {
			name, err := h.send(send)
			h.mu.Lock()
			if err != nil {
				delete(h.sent, dest)
			}
			c.name = name
			h.mu.Unlock()
			close(c.done)
			return name, err
		}
		select {
		case <-c.done:
			h.mu.Lock()
			name, ok := c.name, h.sent[dest] == c
			h.mu.Unlock()
			if ok {
				return name, nil
			}
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func (h *File) send(send func(io.Reader) (string, error)) (string, error) {
	file, err := os.Open(h.path)
	if err != nil {
		return "", ErrNotFound
	}
	defer file.Close()
	return send(file)
}

// CleanName keeps the base name of an uploaded file, as Gradio does: no
// directories, no control or reserved characters; an empty name becomes a
// random one.
func CleanName(n string) string {
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
