package gateway

import (
	"sync"

	"github.com/gradiopool/gradiopool/pool"
)

// metricHooks lets the admin history see what the metrics see (completed
// calls, pool events) without a second hook in the pool or the handlers.
type metricHooks struct {
	mu    sync.RWMutex
	calls []func(CallRecord)
	pool  []func(pool.Event)
}

func (h *metricHooks) add(call func(CallRecord), poolEv func(pool.Event)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if call != nil {
		h.calls = append(h.calls, call)
	}
	if poolEv != nil {
		h.pool = append(h.pool, poolEv)
	}
}

func (h *metricHooks) onCall(c CallRecord) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, f := range h.calls {
		f(c)
	}
}

func (h *metricHooks) onPool(e pool.Event) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, f := range h.pool {
		f(e)
	}
}
