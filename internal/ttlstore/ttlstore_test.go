package ttlstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/internal/ttlstore"
	"github.com/gradiopool/gradiopool/pool/assign"
	"github.com/gradiopool/gradiopool/pool/assign/assigntest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a hand-moved clock for MemoryConfig.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestMemoryInjectedClock: expiry follows MemoryConfig.Now, not the wall
// clock, and a store without a sweeper starts no goroutine (TestMain's
// goleak would see it: this store is never closed, as the front door's).
func TestMemoryInjectedClock(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m := ttlstore.NewMemory(ttlstore.MemoryConfig{SweepInterval: -1, Now: clk.now})
	if err := m.Set(ctx, "a", `{"replica":"r1"}`, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(ctx, "forever", "v", 0); err != nil {
		t.Fatal(err)
	}
	clk.add(59 * time.Minute)
	if v, ok, err := m.Get(ctx, "a"); !ok || err != nil || v != `{"replica":"r1"}` {
		t.Fatalf("before expiry: %q %v %v", v, ok, err)
	}
	clk.add(time.Minute)
	if v, ok, err := m.Get(ctx, "a"); ok || err != nil {
		t.Fatalf("at expiry: %q %v %v, want gone", v, ok, err)
	}
	if n, _ := m.Len(ctx); n != 1 {
		t.Errorf("Len %d after the expired entry was read, want 1 (the one without expiry)", n)
	}
	clk.add(1000 * time.Hour)
	if _, ok, _ := m.Get(ctx, "forever"); !ok {
		t.Error("an entry with ttl 0 expired")
	}
}

// TestMemoryClaim: the first claim wins, a later one gets the earlier
// value, and a claim after expiry wins again.
func TestMemoryClaim(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Unix(0, 0)}
	m := ttlstore.NewMemory(ttlstore.MemoryConfig{SweepInterval: -1, Now: clk.now})
	if v, err := m.Claim(ctx, "k", "r1", time.Minute); v != "r1" || err != nil {
		t.Fatalf("first claim: %q %v", v, err)
	}
	if v, err := m.Claim(ctx, "k", "r2", time.Minute); v != "r1" || err != nil {
		t.Fatalf("second claim: %q %v, want the earlier r1", v, err)
	}
	clk.add(time.Minute)
	if v, err := m.Claim(ctx, "k", "r2", time.Minute); v != "r2" || err != nil {
		t.Fatalf("claim after expiry: %q %v, want r2", v, err)
	}
}

// TestMemoryManyDistinctValues: values that never repeat (the front door's
// bindings) are held and returned intact, and Delete and Sweep free them.
func TestMemoryManyDistinctValues(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Unix(0, 0)}
	m := ttlstore.NewMemory(ttlstore.MemoryConfig{SweepInterval: -1, Now: clk.now})
	defer m.Close()
	const n = 2000
	for i := range n {
		if err := m.Set(ctx, fmt.Sprint("k", i), fmt.Sprint("value-", i), time.Duration(i%2+1)*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if v, ok, _ := m.Get(ctx, fmt.Sprint("k", i)); !ok || v != fmt.Sprint("value-", i) {
			t.Fatalf("k%d = %q %v", i, v, ok)
		}
	}
	_ = m.Delete(ctx, "k0")
	clk.add(time.Minute)
	if got := m.Sweep(); got != n/2-1 {
		t.Errorf("Sweep removed %d, want %d (the 1-minute entries but the deleted one)", got, n/2-1)
	}
	if l, _ := m.Len(ctx); l != n/2 {
		t.Errorf("Len %d, want %d", l, n/2)
	}
}

func TestMemoryClosed(t *testing.T) {
	ctx := context.Background()
	m := ttlstore.NewMemory(ttlstore.MemoryConfig{})
	m.Close()
	m.Close() // twice is fine
	if _, err := m.Claim(ctx, "k", "v", 0); !errors.Is(err, ttlstore.ErrClosed) {
		t.Errorf("Claim after Close: %v", err)
	}
	if err := m.Delete(ctx, "k"); !errors.Is(err, ttlstore.ErrClosed) {
		t.Errorf("Delete after Close: %v", err)
	}
}

// TestMemoryConformance runs package pool's assignment-store suite on the
// memory store directly.
func TestMemoryConformance(t *testing.T) {
	assigntest.Run(t, func(t *testing.T) assign.Store {
		s := ttlstore.NewMemory(ttlstore.MemoryConfig{})
		t.Cleanup(func() { s.Close() })
		return s
	}, assigntest.Options{TTL: 200 * time.Millisecond})
}

func redisClient(t *testing.T) *redis.Client {
	addr := os.Getenv("GRADIOPOOL_REDIS_ADDR")
	if addr == "" {
		addr = redistest.Start(t)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedisWithoutIndex: the front door's layout: one key per entry named
// KeyPrefix + key, nothing else written, and Len refused.
func TestRedisWithoutIndex(t *testing.T) {
	ctx := context.Background()
	c := redisClient(t)
	prefix := fmt.Sprintf("{ttlstore-test-%d}:fd:", os.Getpid())
	r, err := ttlstore.NewRedis(ttlstore.RedisConfig{Client: c, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Set(ctx, "s1", `{"replica":"r1"}`, time.Hour); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := r.Get(ctx, "s1"); !ok || err != nil || v != `{"replica":"r1"}` {
		t.Fatalf("Get: %q %v %v", v, ok, err)
	}
	keys, err := c.Keys(ctx, "{ttlstore-test-"+fmt.Sprint(os.Getpid())+"}*").Result()
	if err != nil || len(keys) != 1 || keys[0] != prefix+"s1" {
		t.Fatalf("keys %v %v, want only %s", keys, err, prefix+"s1")
	}
	if ttl := c.PTTL(ctx, prefix+"s1").Val(); ttl <= 0 || ttl > time.Hour {
		t.Errorf("key TTL %v, want (0, 1h]", ttl)
	}
	if v, err := r.Claim(ctx, "s1", "other", time.Hour); v != `{"replica":"r1"}` || err != nil {
		t.Errorf("Claim of a held key: %q %v", v, err)
	}
	if v, ok, err := r.GetRefresh(ctx, "s1", 2*time.Hour); !ok || err != nil || v == "" {
		t.Errorf("GetRefresh: %q %v %v", v, ok, err)
	}
	if ttl := c.PTTL(ctx, prefix+"s1").Val(); ttl <= time.Hour {
		t.Errorf("key TTL %v after GetRefresh(2h), want > 1h", ttl)
	}
	if _, err := r.Len(ctx); err == nil {
		t.Error("Len without an index succeeded")
	}
	if err := r.Delete(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.Get(ctx, "s1"); ok || err != nil {
		t.Errorf("after Delete: %v %v", ok, err)
	}
}

// TestRedisConformance runs package pool's assignment-store suite on the
// Redis store with an index, named as package assign names them.
func TestRedisConformance(t *testing.T) {
	c := redisClient(t)
	n := 0
	assigntest.Run(t, func(t *testing.T) assign.Store {
		n++
		p := fmt.Sprintf("{ttlstore-test-%d-%d}:", os.Getpid(), n)
		s, err := ttlstore.NewRedis(ttlstore.RedisConfig{Client: c, KeyPrefix: p + "u:", IndexKey: p + "index"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, assigntest.Options{TTL: 600 * time.Millisecond})
}

func TestNewRedisNeedsClient(t *testing.T) {
	if _, err := ttlstore.NewRedis(ttlstore.RedisConfig{}); err == nil {
		t.Error("NewRedis without a client succeeded")
	}
}

// TestMemoryMaxEntries (issue 33): a flood of new keys never holds more
// than the bound (rounded up to whole shards), each eviction is counted,
// and the key evicted is the least recently used: one read keeps a key.
func TestMemoryMaxEntries(t *testing.T) {
	ctx := context.Background()
	m := ttlstore.NewMemory(ttlstore.MemoryConfig{SweepInterval: -1, MaxEntries: 64 * 4})
	defer m.Close()
	const bound = 64 * 4
	// "keep" is read between the writes of the flood: it stays.
	if err := m.Set(ctx, "keep", "r1", time.Hour); err != nil {
		t.Fatal(err)
	}
	const flood = 20_000
	for i := range flood {
		if err := m.Set(ctx, fmt.Sprintf("user-%d", i), "r2", time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Claim(ctx, fmt.Sprintf("claim-%d", i), "r3", time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := m.Get(ctx, "keep"); !ok {
			t.Fatalf("the key read after every write was evicted after %d writes", i)
		}
	}
	n, _ := m.Len(ctx)
	if n > bound {
		t.Errorf("%d entries held after %d new keys, bound %d", n, 2*flood+1, bound)
	}
	if got, want := m.Evicted(), uint64(2*flood+1-n); got != want {
		t.Errorf("Evicted() = %d, want %d (keys set %d, held %d)", got, want, 2*flood+1, n)
	}
	// The newest keys are held, the oldest went.
	if _, ok, _ := m.Get(ctx, fmt.Sprintf("user-%d", flood-1)); !ok {
		t.Error("the newest key was evicted")
	}
	if _, ok, _ := m.Get(ctx, "user-0"); ok {
		t.Error("the oldest key is still held")
	}
	// Without a bound nothing is evicted.
	u := ttlstore.NewMemory(ttlstore.MemoryConfig{SweepInterval: -1})
	defer u.Close()
	for i := range 1000 {
		_ = u.Set(ctx, fmt.Sprintf("user-%d", i), "r", time.Hour)
	}
	if n, _ := u.Len(ctx); n != 1000 || u.Evicted() != 0 {
		t.Errorf("no bound: %d held, %d evicted", n, u.Evicted())
	}
}
