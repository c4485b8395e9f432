package ttlstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
	"unique"
)

// DefaultSweepInterval is how often [Memory] removes expired entries when
// MemoryConfig.SweepInterval is zero.
const DefaultSweepInterval = time.Minute

// numShards splits the map so that a sweep (which holds one shard's lock at a
// time) and lookups rarely contend. A power of two.
const numShards = 64

// MemoryConfig configures [NewMemory]. The zero value is ready to use.
type MemoryConfig struct {
	// SweepInterval is how often expired entries are removed.
	// Zero means DefaultSweepInterval; negative disables the sweeper (entries
	// then expire only lazily, when looked up, or on Sweep).
	SweepInterval time.Duration
	// Now is the clock expiry is measured on; nil means time.Now.
	Now func() time.Time
	// MaxEntries bounds the entries held: a new key past it evicts the
	// least recently used entry (set, claimed or read last) of its shard,
	// counted by Evicted. Each of the 64 shards holds at most MaxEntries/64
	// (rounded up), so the store holds at most that times 64. <= 0: no
	// bound (entries go only when they expire).
	MaxEntries int
}

// Memory is the in-process store. Create it with [NewMemory] and stop its
// sweeper with [Memory.Close].
type Memory struct {
	shards   [numShards]shard
	now      func() time.Time
	perShard int           // entries one shard may hold; 0: no bound
	evicted  atomic.Uint64 // entries evicted for MaxEntries

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

type shard struct {
	mu sync.Mutex // guards m and peak
	m  map[string]entry
	// peak is the largest len(m) since m was last rebuilt: Go maps never
	// shrink, so Sweep rebuilds a map that fell well below its peak.
	peak int
	_    [32]byte // keeps shards on separate cache lines
}

// entry is 24 bytes: the expiry in Unix nanoseconds (0 = never), the
// last use (for MaxEntries' eviction) and the value, canonicalised
// (package unique) so that values that repeat (replica names: a million
// users on three replicas) are stored once, while a value no entry holds
// any more is collected.
type entry struct {
	exp  int64
	used int64
	val  unique.Handle[string]
}

// NewMemory returns an empty in-memory store and starts its sweeper.
func NewMemory(cfg MemoryConfig) *Memory {
	m := &Memory{now: cfg.Now, done: make(chan struct{})}
	if cfg.MaxEntries > 0 {
		m.perShard = (cfg.MaxEntries + numShards - 1) / numShards
	}
	if m.now == nil {
		m.now = time.Now
	}
	for i := range m.shards {
		m.shards[i].m = map[string]entry{}
	}
	every := cfg.SweepInterval
	if every == 0 {
		every = DefaultSweepInterval
	}
	if every > 0 {
		m.wg.Add(1)
		go m.sweepLoop(every)
	}
	return m
}

// Close stops the sweeper and empties the store. Later calls return ErrClosed.
// Close is safe to call more than once.
func (m *Memory) Close() error {
	m.closeOnce.Do(func() {
		close(m.done)
		m.wg.Wait()
		for i := range m.shards {
			s := &m.shards[i]
			s.mu.Lock()
			s.m = nil
			s.mu.Unlock()
		}
	})
	return nil
}

func (m *Memory) closed() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// shardFor picks a shard by FNV-1a of the key (no allocation).
func (m *Memory) shardFor(key string) *shard {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return &m.shards[h&(numShards-1)]
}

// expiry is the entry's expiry for ttl from now (0: never).
func (m *Memory) expiry(now time.Time, ttl time.Duration) int64 {
	if ttl <= 0 {
		return 0
	}
	return now.Add(ttl).UnixNano()
}

// Get returns the value of key, if it has not expired. Get does not
// extend the entry.
func (m *Memory) Get(_ context.Context, key string) (string, bool, error) {
	if m.closed() {
		return "", false, ErrClosed
	}
	s := m.shardFor(key)
	now := m.now().UnixNano()
	s.mu.Lock()
	e, ok := s.m[key]
	if ok && e.exp != 0 && e.exp <= now {
		delete(s.m, key) // lazy expiry
		ok = false
	} else if ok && m.perShard > 0 {
		e.used = now
		s.m[key] = e
	}
	s.mu.Unlock()
	if !ok {
		return "", false, nil
	}
	return e.val.Value(), true, nil
}

// GetRefresh is Get; when the key is found, its expiry is also set to ttl
// from now (ttl <= 0: left as it is).
func (m *Memory) GetRefresh(ctx context.Context, key string, ttl time.Duration) (string, bool, error) {
	v, ok, err := m.Get(ctx, key)
	if ok && err == nil && ttl > 0 {
		err = m.Set(ctx, key, v, ttl)
	}
	return v, ok, err
}

// Set sets key to val for ttl, replacing any earlier value and its expiry.
func (m *Memory) Set(_ context.Context, key, val string, ttl time.Duration) error {
	if m.closed() {
		return ErrClosed
	}
	now := m.now()
	e := entry{val: unique.Make(val), exp: m.expiry(now, ttl), used: now.UnixNano()}
	s := m.shardFor(key)
	s.mu.Lock()
	if s.m != nil {
		if _, ok := s.m[key]; !ok {
			key = cloneKey(key) // do not pin the caller's larger buffer
			m.makeRoomLocked(s, now.UnixNano())
		}
		s.m[key] = e
		s.peak = max(s.peak, len(s.m))
	}
	s.mu.Unlock()
	return nil
}

// Claim sets key to val for ttl unless key holds a live value, and returns
// the value key holds after the call: val when the claim won, else the
// earlier value (whose expiry is left as it was).
func (m *Memory) Claim(_ context.Context, key, val string, ttl time.Duration) (string, error) {
	if m.closed() {
		return "", ErrClosed
	}
	now := m.now()
	e := entry{val: unique.Make(val), exp: m.expiry(now, ttl), used: now.UnixNano()}
	s := m.shardFor(key)
	s.mu.Lock()
	old, ok := s.m[key]
	if ok && (old.exp == 0 || old.exp > now.UnixNano()) {
		if m.perShard > 0 {
			old.used = now.UnixNano()
			s.m[key] = old
		}
		s.mu.Unlock()
		return old.val.Value(), nil
	}
	if s.m != nil {
		if !ok {
			m.makeRoomLocked(s, now.UnixNano())
		}
		s.m[cloneKey(key)] = e
		s.peak = max(s.peak, len(s.m))
	}
	s.mu.Unlock()
	return val, nil
}

func cloneKey(k string) string { return string([]byte(k)) }

// makeRoomLocked makes room in s, which is about to get a new key, for
// MaxEntries: an expired entry goes first, else the least recently used.
// One pass over the shard: its length is bounded by perShard, so a new
// key's cost does not grow with the number of keys ever seen.
// WARNING: s.mu must be held.
func (m *Memory) makeRoomLocked(s *shard, now int64) {
	if m.perShard <= 0 || len(s.m) < m.perShard {
		return
	}
	var oldest string
	oldestUsed := int64(0)
	first := true
	for k, e := range s.m {
		if e.exp != 0 && e.exp <= now {
			delete(s.m, k)
			return
		}
		if first || e.used < oldestUsed {
			oldest, oldestUsed, first = k, e.used, false
		}
	}
	delete(s.m, oldest)
	m.evicted.Add(1)
}

// Evicted is how many entries were evicted for MaxEntries (not counting
// those that expired).
func (m *Memory) Evicted() uint64 { return m.evicted.Load() }

// Delete removes key; deleting a missing key is no error.
func (m *Memory) Delete(_ context.Context, key string) error {
	if m.closed() {
		return ErrClosed
	}
	s := m.shardFor(key)
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
	return nil
}

// Len counts the entries held, including those that expired after the last
// sweep and were not looked up since.
func (m *Memory) Len(_ context.Context) (int, error) {
	if m.closed() {
		return 0, ErrClosed
	}
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n, nil
}

// Sweep removes every expired entry now and returns how many it removed.
// The sweeper calls it every SweepInterval; it holds one shard lock at a time.
func (m *Memory) Sweep() int {
	now := m.now().UnixNano()
	removed := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			if e.exp != 0 && e.exp <= now {
				delete(s.m, k)
				removed++
			}
		}
		if n := len(s.m); s.peak > 1024 && n < s.peak/4 {
			fresh := make(map[string]entry, n)
			for k, e := range s.m {
				fresh[k] = e
			}
			s.m, s.peak = fresh, n
		}
		s.mu.Unlock()
	}
	return removed
}

func (m *Memory) sweepLoop(every time.Duration) {
	defer m.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-t.C:
			m.Sweep()
		}
	}
}
