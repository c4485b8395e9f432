package assign_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/pool/assign"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryGetSetDelete(t *testing.T) {
	ctx := context.Background()
	s := assign.NewMemory(assign.MemoryConfig{})
	defer s.Close()

	if _, ok, err := s.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("Get on empty store = ok %v, err %v", ok, err)
	}
	if err := s.Set(ctx, "k", "replica-a", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, "k2", "replica-b", 0); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ key, want string }{{"k", "replica-a"}, {"k2", "replica-b"}}
	for _, tt := range tests {
		got, ok, err := s.Get(ctx, tt.key)
		if err != nil || !ok || got != tt.want {
			t.Errorf("Get(%q) = %q, %v, %v; want %q", tt.key, got, ok, err, tt.want)
		}
	}
	if err := s.Set(ctx, "k", "replica-b", time.Hour); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.Get(ctx, "k"); got != "replica-b" {
		t.Errorf("after re-Set, Get = %q, want replica-b", got)
	}
	if n, _ := s.Len(ctx); n != 2 {
		t.Errorf("Len = %d, want 2", n)
	}
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "missing"); err != nil {
		t.Errorf("Delete(missing) = %v", err)
	}
	if _, ok, _ := s.Get(ctx, "k"); ok {
		t.Error("Get after Delete found the key")
	}
	if n, _ := s.Len(ctx); n != 1 {
		t.Errorf("Len = %d, want 1", n)
	}
}

func TestMemoryClosed(t *testing.T) {
	ctx := context.Background()
	s := assign.NewMemory(assign.MemoryConfig{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := s.Set(ctx, "k", "r", time.Hour); err != assign.ErrClosed {
		t.Errorf("Set after Close = %v, want ErrClosed", err)
	}
	if _, _, err := s.Get(ctx, "k"); err != assign.ErrClosed {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Len(ctx); err != assign.ErrClosed {
		t.Errorf("Len after Close = %v, want ErrClosed", err)
	}
}

func TestMemoryExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := assign.NewMemory(assign.MemoryConfig{SweepInterval: time.Minute})
		defer s.Close()

		_ = s.Set(ctx, "lazy", "r1", time.Hour)
		_ = s.Set(ctx, "swept", "r1", time.Hour)
		_ = s.Set(ctx, "forever", "r2", 0)
		time.Sleep(59 * time.Minute)
		_ = s.Set(ctx, "refreshed", "r1", time.Hour)
		if _, ok, _ := s.Get(ctx, "lazy"); !ok {
			t.Fatal("entry expired before its TTL")
		}
		time.Sleep(time.Minute)
		// Exactly at the TTL the entry is gone, even before a sweep ran.
		if _, ok, _ := s.Get(ctx, "lazy"); ok {
			t.Error("Get returned an expired entry")
		}
		time.Sleep(time.Minute + time.Second) // one more sweep
		synctest.Wait()
		if n, _ := s.Len(ctx); n != 2 {
			t.Errorf("Len after sweep = %d, want 2 (forever, refreshed)", n)
		}
		if _, ok, _ := s.Get(ctx, "refreshed"); !ok {
			t.Error("refreshed entry expired early")
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n, _ := s.Len(ctx); n != 1 {
			t.Errorf("Len = %d, want 1 (forever)", n)
		}
	})
}

func TestMemorySweepShrinks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := assign.NewMemory(assign.MemoryConfig{SweepInterval: -1})
		defer s.Close()
		for i := range 20_000 {
			_ = s.Set(ctx, key(i), "r", time.Minute)
		}
		time.Sleep(2 * time.Minute)
		if got := s.Sweep(); got != 20_000 {
			t.Errorf("Sweep removed %d, want 20000", got)
		}
		if n, _ := s.Len(ctx); n != 0 {
			t.Errorf("Len = %d, want 0", n)
		}
	})
}

func TestMemoryConcurrent(t *testing.T) {
	ctx := context.Background()
	s := assign.NewMemory(assign.MemoryConfig{SweepInterval: time.Millisecond})
	defer s.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				k := key(g*10000 + i%100)
				_ = s.Set(ctx, k, fmt.Sprint("r", i%3), time.Hour)
				if _, ok, err := s.Get(ctx, k); !ok || err != nil {
					t.Errorf("Get(%s) = %v, %v", k, ok, err)
					return
				}
				if i%7 == 0 {
					_ = s.Delete(ctx, k)
				}
				_, _ = s.Len(ctx)
			}
		})
	}
	wg.Wait()
}

// key returns a key shaped like package pool's: 32 hex digits.
func key(i int) string {
	sum := sha256.Sum256([]byte(fmt.Sprint("user", i, "@example.com")))
	return hex.EncodeToString(sum[:16])
}

// bytesPerAssignment fills a store with n assignments and returns the growth
// of HeapInuse per assignment.
func bytesPerAssignment(n int) float64 {
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = key(i)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := assign.NewMemory(assign.MemoryConfig{SweepInterval: -1})
	for i, k := range keys {
		_ = s.Set(ctx, k, fmt.Sprint("replica-", i%3), time.Hour)
	}
	keys = nil
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n2, _ := s.Len(ctx); n2 != n {
		panic("lost assignments")
	}
	runtime.KeepAlive(keys)
	s.Close()
	// The keys slice was freed before the second reading, but the key bytes
	// themselves now belong to the store, so they count: that is the real cost.
	return float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / float64(n)
}

func TestMemoryFootprint(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 50k assignments")
	}
	const limit = 300 // bytes per assignment: 1M must fit well under 300 MB
	if got := bytesPerAssignment(50_000); got > limit {
		t.Errorf("%.0f bytes per assignment, want < %d", got, limit)
	}
}

// BenchmarkMemory1M reports the heap cost of one million assignments.
func BenchmarkMemory1M(b *testing.B) {
	var per float64
	for b.Loop() {
		per = bytesPerAssignment(1_000_000)
	}
	b.ReportMetric(per, "bytes/assignment")
	b.ReportMetric(per*1_000_000/(1<<20), "MiB/1M")
}

func BenchmarkMemoryGetSet(b *testing.B) {
	ctx := context.Background()
	s := assign.NewMemory(assign.MemoryConfig{})
	defer s.Close()
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = key(i)
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			k := keys[i%len(keys)]
			_ = s.Set(ctx, k, "r", time.Hour)
			_, _, _ = s.Get(ctx, k)
			i++
		}
	})
}
