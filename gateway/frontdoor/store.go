package frontdoor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gradiopool/gradiopool/internal/ttlstore"
)

// Store keeps caller session hash -> Binding. Implementations must be safe
// for concurrent use; an entry may vanish after its ttl.
type Store interface {
	Get(ctx context.Context, front string) (Binding, bool, error)
	Set(ctx context.Context, front string, b Binding, ttl time.Duration) error
	Delete(ctx context.Context, front string) error
}

// kv is the part of the module's TTL store (internal/ttlstore, the one
// package pool's user assignments live in too) that bindings need.
type kv interface {
	Get(ctx context.Context, key string) (string, bool, error)
	Set(ctx context.Context, key, val string, ttl time.Duration) error
	Delete(ctx context.Context, key string) error
}

// bindings stores Bindings as JSON values of a kv.
type bindings struct{ kv kv }

func (s bindings) Get(ctx context.Context, front string) (Binding, bool, error) {
	v, ok, err := s.kv.Get(ctx, front)
	if err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("frontdoor: %w", err)
		}
		return Binding{}, false, err
	}
	var b Binding
	if err := json.Unmarshal([]byte(v), &b); err != nil {
		return Binding{}, false, fmt.Errorf("frontdoor: store get: bad binding: %w", err)
	}
	return b, true, nil
}

func (s bindings) Set(ctx context.Context, front string, b Binding, ttl time.Duration) error {
	v, _ := json.Marshal(b) // three strings: cannot fail
	if err := s.kv.Set(ctx, front, string(v), ttl); err != nil {
		return fmt.Errorf("frontdoor: %w", err)
	}
	return nil
}

func (s bindings) Delete(ctx context.Context, front string) error {
	if err := s.kv.Delete(ctx, front); err != nil {
		return fmt.Errorf("frontdoor: %w", err)
	}
	return nil
}

// MemoryStore is the in-process [Store]. Expired entries go when they are
// read (the front door reads each session's binding again before it
// forgets the session), so it needs no sweeper and no Close.
type MemoryStore struct {
	bindings
	m *ttlstore.Memory
}

// NewMemoryStore returns an empty store on the clock now (nil: time.Now).
func NewMemoryStore(now func() time.Time) *MemoryStore {
	m := ttlstore.NewMemory(ttlstore.MemoryConfig{SweepInterval: -1, Now: now})
	return &MemoryStore{bindings: bindings{kv: m}, m: m}
}

// Len is the number of entries (expired ones included until read).
func (s *MemoryStore) Len() int {
	n, _ := s.m.Len(context.Background()) // errors only once closed, never here
	return n
}
