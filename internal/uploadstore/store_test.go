package uploadstore

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestQuotas: each bound refuses the upload that would pass it, keeps
// nothing of it, and frees its bytes for the next one.
func TestQuotas(t *testing.T) {
	now := time.Unix(1000, 0)
	s := New(t.TempDir(), "g1.", func() time.Time { return now }, 10, 15)
	defer s.Close()
	if _, err := s.Put("a", "big", strings.NewReader("0123456789x"), 0); !errors.Is(err, ErrClientQuota) {
		t.Fatalf("11 bytes over a 10-byte client quota: %v", err)
	}
	if _, err := s.Put("a", "big", strings.NewReader("0123456"), 6); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("7 bytes over a 6-byte file bound: %v", err)
	}
	if s.Bytes() != 0 || s.Count() != 0 {
		t.Fatalf("refused uploads kept %d bytes in %d files", s.Bytes(), s.Count())
	}
	a, err := s.Put("a", "a.txt", strings.NewReader("0123456789"), 0)
	if err != nil || !strings.HasPrefix(a.ID, "g1.") {
		t.Fatalf("a's 10 bytes: %v %+v", err, a)
	}
	if _, err := s.Put("a", "more", strings.NewReader("x"), 0); !errors.Is(err, ErrClientQuota) {
		t.Fatalf("one byte past a's quota: %v", err)
	}
	if _, err := s.Put("b", "b.txt", strings.NewReader("012345"), 0); !errors.Is(err, ErrTotalQuota) {
		t.Fatalf("b's 6 bytes past the 15-byte total: %v", err)
	}
	if s.Bytes() != 10 || s.Count() != 1 {
		t.Fatalf("%d bytes in %d files, want a's 10 in 1", s.Bytes(), s.Count())
	}
	s.Remove(a.ID)
	if _, err := s.Put("b", "b.txt", strings.NewReader("012345"), 0); err != nil {
		t.Fatalf("b after a's file was removed: %v", err)
	}
}

// TestSweepAndOpen: a swept file is gone, its bytes freed; an open of an
// unknown id is ErrNotFound.
func TestSweepAndOpen(t *testing.T) {
	var now atomic.Int64
	s := New("", "", func() time.Time { return time.Unix(now.Load(), 0) }, 0, 0)
	old, err := s.Put("a", "old", strings.NewReader("old"), 0)
	if err != nil {
		t.Fatal(err)
	}
	now.Store(100)
	kept, err := s.Put("a", "new", strings.NewReader("new"), 0)
	if err != nil {
		t.Fatal(err)
	}
	s.Sweep(time.Unix(50, 0))
	if _, err := s.Open(old.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("swept file opened: %v", err)
	}
	if _, err := old.SendOnce(context.Background(), "r1", func(io.Reader) (string, error) { return "x", nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("a swept file sent: %v", err)
	}
	r, err := s.Open(kept.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "new" || s.Bytes() != 3 {
		t.Errorf("kept file %q, %d bytes kept", b, s.Bytes())
	}
	dir := s.dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the temporary directory %s survived Close: %v", dir, err)
	}
}

// TestSendOnce: joins naming one file at once send it to a destination
// once; a failed send is tried again by the next; another destination
// gets its own copy.
func TestSendOnce(t *testing.T) {
	s := New(t.TempDir(), "", time.Now, 0, 0)
	defer s.Close()
	h, err := s.Put("a", "f.txt", strings.NewReader("payload"), 0)
	if err != nil {
		t.Fatal(err)
	}
	var sends atomic.Int32
	send := func(r io.Reader) (string, error) {
		b, _ := io.ReadAll(r)
		if string(b) != "payload" {
			return "", errors.New("wrong content " + string(b))
		}
		sends.Add(1)
		return "/tmp/replica/f.txt", nil
	}
	if _, err := h.SendOnce(context.Background(), "r1", func(io.Reader) (string, error) { return "", errors.New("replica down") }); err == nil {
		t.Fatal("a failed send reported no error")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if name, err := h.SendOnce(context.Background(), "r1", send); err != nil || name != "/tmp/replica/f.txt" {
				t.Errorf("send: %q %v", name, err)
			}
		})
	}
	wg.Wait()
	if n := sends.Load(); n != 1 {
		t.Fatalf("%d sends to r1, want 1", n)
	}
	if _, err := h.SendOnce(context.Background(), "r2", send); err != nil || sends.Load() != 2 {
		t.Fatalf("r2: %v, %d sends", err, sends.Load())
	}
}

func TestCleanName(t *testing.T) {
	for in, want := range map[string]string{
		"a.txt":              "a.txt",
		"../../etc/passwd":   "passwd",
		`C:\Users\x\a b.png`: "a b.png",
		"bad\x00name:*.txt":  "bad_name__.txt",
	} {
		if got := CleanName(in); got != want {
			t.Errorf("CleanName(%q) = %q, want %q", in, got, want)
		}
	}
	for _, in := range []string{"", ".", ".."} {
		if got := CleanName(in); !strings.HasPrefix(got, "tmp") {
			t.Errorf("CleanName(%q) = %q, want a random tmp name", in, got)
		}
	}
}

// TestSendOnceHoldsNoLock: while a send of the file to one replica hangs,
// a send to another replica goes through, and a join waiting for the
// hung one gives up with its own context.
func TestSendOnceHoldsNoLock(t *testing.T) {
	s := New(t.TempDir(), "", time.Now, 0, 0)
	defer s.Close()
	h, err := s.Put("a", "f.txt", strings.NewReader("payload"), 0)
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	hung := make(chan error, 1)
	go func() {
		_, err := h.SendOnce(context.Background(), "r1", func(io.Reader) (string, error) {
			close(started)
			<-release
			return "/r1/f.txt", nil
		})
		hung <- err
	}()
	<-started
	done := make(chan error, 2)
	go func() {
		_, err := h.SendOnce(context.Background(), "r2", func(io.Reader) (string, error) { return "/r2/f.txt", nil })
		done <- err
	}()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := h.SendOnce(ctx, "r1", func(io.Reader) (string, error) { return "", errors.New("sent twice") })
		done <- err
	}()
	cancel()
	for range 2 {
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("while r1's send hangs: %v", err)
			}
		case <-time.After(10 * time.Second): // a hang guard, not a timing
			t.Fatal("a send waited for another replica's hung send")
		}
	}
	close(release)
	if err := <-hung; err != nil {
		t.Fatal(err)
	}
	if name, err := h.SendOnce(context.Background(), "r1", nil); err != nil || name != "/r1/f.txt" {
		t.Errorf("r1 after its send: %q %v", name, err)
	}
}
