package assigntest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/pool/assign"
)

// Options adapt the suite to a store. The zero value uses real time with a
// TTL of DefaultTTL.
type Options struct {
	// TTL is the time to live used by the expiry cases. Zero: DefaultTTL.
	TTL time.Duration
	// Wrap runs each case; a store whose clock can be faked runs the case
	// in a testing/synctest bubble here (synctest.Test), so that TTLs of an
	// hour pass at once. Nil: the case runs directly.
	Wrap func(t *testing.T, f func(t *testing.T))
}

// DefaultTTL is the TTL of the expiry cases under real time.
const DefaultTTL = 300 * time.Millisecond

// Run runs every case against stores made by newStore, one per case.
// newStore should register the store's clean-up with t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) assign.Store, opts Options) {
	ttl := opts.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	wrap := opts.Wrap
	if wrap == nil {
		wrap = func(t *testing.T, f func(t *testing.T)) { f(t) }
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wrap(t, func(t *testing.T) { c.run(t, newStore(t), ttl) })
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, s assign.Store, ttl time.Duration)
}

// cases are the behaviours package pool relies on, each explained.
var cases = []testCase{
	{"a missing key is not found, without error", func(t *testing.T, s assign.Store, ttl time.Duration) {
		expectMissing(t, s, "missing")
	}},
	{"Set then Get returns the replica", func(t *testing.T, s assign.Store, ttl time.Duration) {
		set(t, s, "k1", "replica-a", ttl)
		expect(t, s, "k1", "replica-a")
	}},
	{"Set replaces the replica (a user re-pinned after a failover)", func(t *testing.T, s assign.Store, ttl time.Duration) {
		set(t, s, "k1", "replica-a", ttl)
		set(t, s, "k1", "replica-b", ttl)
		expect(t, s, "k1", "replica-b")
		expectLen(t, s, 1)
	}},
	{"Delete removes a key; deleting a missing key is no error", func(t *testing.T, s assign.Store, ttl time.Duration) {
		set(t, s, "k1", "replica-a", ttl)
		set(t, s, "k2", "replica-b", ttl)
		if err := s.Delete(context.Background(), "k1"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(context.Background(), "never-set"); err != nil {
			t.Errorf("Delete(missing) = %v", err)
		}
		expectMissing(t, s, "k1")
		expect(t, s, "k2", "replica-b")
		expectLen(t, s, 1)
	}},
	{"Len counts the assignments", func(t *testing.T, s assign.Store, ttl time.Duration) {
		expectLen(t, s, 0)
		for i := range 10 {
			set(t, s, fmt.Sprint("key-", i), fmt.Sprint("replica-", i%3), ttl)
		}
		expectLen(t, s, 10)
	}},
	{"an assignment expires after its TTL", func(t *testing.T, s assign.Store, ttl time.Duration) {
		set(t, s, "k1", "replica-a", ttl)
		time.Sleep(ttl / 2)
		expect(t, s, "k1", "replica-a")
		time.Sleep(ttl)
		expectMissing(t, s, "k1")
	}},
	{"Set refreshes the TTL (every call of a user extends the assignment)", func(t *testing.T, s assign.Store, ttl time.Duration) {
		set(t, s, "k1", "replica-a", ttl)
		for range 3 {
			time.Sleep(ttl * 3 / 4)
			set(t, s, "k1", "replica-a", ttl)
		}
		expect(t, s, "k1", "replica-a")
	}},
	{"a TTL of zero means no expiry", func(t *testing.T, s assign.Store, ttl time.Duration) {
		set(t, s, "k1", "replica-a", 0)
		time.Sleep(2 * ttl)
		expect(t, s, "k1", "replica-a")
	}},
	{"Get does not extend the TTL", func(t *testing.T, s assign.Store, ttl time.Duration) {
		set(t, s, "k1", "replica-a", ttl)
		time.Sleep(ttl / 2)
		expect(t, s, "k1", "replica-a")
		time.Sleep(ttl * 3 / 4)
		expectMissing(t, s, "k1")
	}},
	{"keys are opaque: 32 hex digits and odd bytes alike", func(t *testing.T, s assign.Store, ttl time.Duration) {
		keys := []string{"0123456789abcdef0123456789abcdef", "a:b", "with space", "ünïcode", "x"}
		for i, k := range keys {
			set(t, s, k, fmt.Sprint("r", i), ttl)
		}
		for i, k := range keys {
			expect(t, s, k, fmt.Sprint("r", i))
		}
	}},
	{"concurrent use is safe", func(t *testing.T, s assign.Store, ttl time.Duration) {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 50 {
					k := fmt.Sprint("g", g, "-", i%10)
					if err := s.Set(context.Background(), k, "r", ttl); err != nil {
						t.Error(err)
						return
					}
					if _, ok, err := s.Get(context.Background(), k); err != nil || !ok {
						t.Errorf("Get(%s) = %v, %v right after Set", k, ok, err)
						return
					}
				}
			})
		}
		wg.Wait()
		expectLen(t, s, 40)
	}},
	{"Claim: the first claim wins, later ones read it, an expired one is claimed again (assign.Claimer only)", func(t *testing.T, s assign.Store, ttl time.Duration) {
		c, ok := s.(assign.Claimer)
		if !ok {
			t.Skip("the store is not an assign.Claimer")
		}
		claim := func(key, replica, want string, ttl time.Duration) {
			t.Helper()
			got, err := c.Claim(context.Background(), key, replica, ttl)
			if err != nil || got != want {
				t.Errorf("Claim(%q, %q) = %q, %v; want %q", key, replica, got, err, want)
			}
		}
		claim("c1", "r1", "r1", ttl)
		claim("c1", "r2", "r1", ttl)
		expect(t, s, "c1", "r1")
		set(t, s, "c2", "r3", ttl)
		claim("c2", "r1", "r3", ttl)
		claim("c3", "r1", "r1", 0)
		expectLen(t, s, 3)
		deadline := time.Now().Add(ttl + 10*time.Second)
		for {
			if got, _ := c.Claim(context.Background(), "c1", "r2", ttl); got == "r2" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("an expired assignment was never claimed again")
			}
			time.Sleep(ttl / 10)
		}
		expect(t, s, "c1", "r2")
	}},
	{"Claim: of many concurrent claims of one new key exactly one wins and all agree (assign.Claimer only)", func(t *testing.T, s assign.Store, ttl time.Duration) {
		c, ok := s.(assign.Claimer)
		if !ok {
			t.Skip("the store is not an assign.Claimer")
		}
		var wg sync.WaitGroup
		got := make([]string, 16)
		for i := range got {
			wg.Go(func() {
				v, err := c.Claim(context.Background(), "new-user", fmt.Sprint("r", i), ttl)
				if err != nil {
					t.Error(err)
				}
				got[i] = v
			})
		}
		wg.Wait()
		for i, v := range got {
			if v != got[0] {
				t.Fatalf("claim %d saw %q, claim 0 saw %q", i, v, got[0])
			}
		}
		expect(t, s, "new-user", got[0])
	}},
	{"GetRefresh (a Refresher) reads and extends an assignment", func(t *testing.T, s assign.Store, ttl time.Duration) {
		r, ok := s.(assign.Refresher)
		if !ok {
			t.Skip("not a Refresher")
		}
		ctx := context.Background()
		if _, found, err := r.GetRefresh(ctx, "missing", time.Hour); err != nil || found {
			t.Fatalf("GetRefresh(missing) = %v, %v", found, err)
		}
		set(t, s, "k1", "replica-a", ttl)
		got, found, err := r.GetRefresh(ctx, "k1", 3*ttl)
		if err != nil || !found || got != "replica-a" {
			t.Fatalf("GetRefresh(k1) = %q, %v, %v", got, found, err)
		}
		time.Sleep(ttl + ttl/2) // past the first TTL: alive only if extended
		expect(t, s, "k1", "replica-a")
		expectLen(t, s, 1)
	}},
}

func set(t *testing.T, s assign.Store, key, replica string, ttl time.Duration) {
	t.Helper()
	if err := s.Set(context.Background(), key, replica, ttl); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
}

func expect(t *testing.T, s assign.Store, key, want string) {
	t.Helper()
	got, ok, err := s.Get(context.Background(), key)
	if err != nil || !ok || got != want {
		t.Errorf("Get(%q) = %q, %v, %v; want %q", key, got, ok, err, want)
	}
}

func expectMissing(t *testing.T, s assign.Store, key string) {
	t.Helper()
	got, ok, err := s.Get(context.Background(), key)
	if err != nil || ok {
		t.Errorf("Get(%q) = %q, %v, %v; want not found", key, got, ok, err)
	}
}

func expectLen(t *testing.T, s assign.Store, want int) {
	t.Helper()
	n, err := s.Len(context.Background())
	if err != nil || n != want {
		t.Errorf("Len = %d, %v; want %d", n, err, want)
	}
}
