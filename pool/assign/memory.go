package assign

import (
	"context"
	"sync"
	"time"
)

// DefaultSweepInterval is how often [Memory] removes expired assignments when
// MemoryConfig.SweepInterval is zero.
const DefaultSweepInterval = time.Minute

// numShards splits the map so that a sweep (which holds one shard's lock at a
// time) and lookups rarely contend. A power of two.
const numShards = 64

// MemoryConfig configures [NewMemory]. The zero value is ready to use.
type MemoryConfig struct {
	// SweepInterval is how often expired assignments are removed.
	// Zero means DefaultSweepInterval; negative disables the sweeper (entries
	// then expire only lazily, when looked up).
	SweepInterval time.Duration
}

// Memory is an in-process [Store]. Create it with [NewMemory] and stop its
// sweeper with [Memory.Close].
type Memory struct {
	shards [numShards]shard

	// namesMu guards names and nameList: the interned replica names, so
	// that each entry holds a 4-byte index instead of a string header.
	namesMu  sync.RWMutex
	names    map[string]uint32
	nameList []string

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

// entry is 16 bytes: the expiry in Unix nanoseconds (0 = never) and the
// interned replica name.
type entry struct {
	exp  int64
	name uint32
}

var (
	_ Store     = (*Memory)(nil)
	_ Refresher = (*Memory)(nil)
)

// NewMemory returns an empty in-memory store and starts its sweeper.
func NewMemory(cfg MemoryConfig) *Memory {
	m := &Memory{names: map[string]uint32{}, done: make(chan struct{})}
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

func (m *Memory) intern(name string) uint32 {
	m.namesMu.RLock()
	i, ok := m.names[name]
	m.namesMu.RUnlock()
	if ok {
		return i
	}
	m.namesMu.Lock()
	defer m.namesMu.Unlock()
	if i, ok := m.names[name]; ok {
		return i
	}
	i = uint32(len(m.nameList))
	m.names[name] = i
	m.nameList = append(m.nameList, name)
	return i
}

func (m *Memory) name(i uint32) string {
	m.namesMu.RLock()
	defer m.namesMu.RUnlock()
	return m.nameList[i]
}

// Get implements [Store].
func (m *Memory) Get(ctx context.Context, key string) (string, bool, error) {
	if m.closed() {
		return "", false, ErrClosed
	}
	s := m.shardFor(key)
	now := time.Now().UnixNano()
	s.mu.Lock()
	e, ok := s.m[key]
	if ok && e.exp != 0 && e.exp <= now {
		delete(s.m, key) // lazy expiry
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		return "", false, nil
	}
	return m.name(e.name), true, nil
}

// GetRefresh implements [Refresher].
func (m *Memory) GetRefresh(ctx context.Context, key string, ttl time.Duration) (string, bool, error) {
	v, ok, err := m.Get(ctx, key)
	if ok && err == nil && ttl > 0 {
		err = m.Set(ctx, key, v, ttl)
	}
	return v, ok, err
}

// Set implements [Store].
func (m *Memory) Set(ctx context.Context, key, replica string, ttl time.Duration) error {
	if m.closed() {
		return ErrClosed
	}
	e := entry{name: m.intern(replica)}
	if ttl > 0 {
		e.exp = time.Now().Add(ttl).UnixNano()
	}
	s := m.shardFor(key)
	s.mu.Lock()
	if s.m != nil {
		if _, ok := s.m[key]; !ok {
			key = cloneKey(key) // do not pin the caller's larger buffer
		}
		s.m[key] = e
		s.peak = max(s.peak, len(s.m))
	}
	s.mu.Unlock()
	return nil
}

func cloneKey(k string) string { return string([]byte(k)) }

// Delete implements [Store].
func (m *Memory) Delete(ctx context.Context, key string) error {
	if m.closed() {
		return ErrClosed
	}
	s := m.shardFor(key)
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
	return nil
}

// Len implements [Store]. It counts entries that expired after the last sweep
// and were not looked up since.
func (m *Memory) Len(ctx context.Context) (int, error) {
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

// Sweep removes every expired assignment now and returns how many it removed.
// The sweeper calls it every SweepInterval; it holds one shard lock at a time.
func (m *Memory) Sweep() int {
	now := time.Now().UnixNano()
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
