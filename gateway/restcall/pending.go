package restcall

import (
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// pendingCalls keeps the calls started by POST /gradio_api/call/{api} for
// their GET, like Gradio's session message buffer: bounded in number (per
// client and in total) and in bytes (per call and in total), freed once
// read to their end, and kept unread for a TTL after they finished.
type pendingCalls struct {
	max          int
	maxPerClient int   // <= 0: no limit
	maxResult    int64 // bytes one call buffers unread; <= 0: no limit
	maxBytes     int64 // bytes every call buffers unread; <= 0: no limit
	ttl          time.Duration

	mu        sync.Mutex // guards calls, perClient and bytes; nothing slow runs under it
	calls     map[string]*pendingCall
	perClient map[string]int
	bytes     int64
}

// record is one Gradio REST event: generating, complete or error.
type record struct {
	name string
	data json.RawMessage
}

type pendingCall struct {
	apiName string
	client  string

	mu       sync.Mutex // guards the fields below
	records  []record   // unread records; records[0] is number base
	base     int
	size     int64 // bytes of records
	gone     bool  // removed: its bytes count no more
	done     bool
	finished time.Time
	changed  chan struct{} // closed and replaced on every new record
	stop     func()        // cancels the call (nil until it started); calls.go
}

func newPendingCalls(max int, ttl time.Duration) *pendingCalls {
	return &pendingCalls{max: max, ttl: ttl, calls: map[string]*pendingCall{}, perClient: map[string]int{}}
}

// Why add refused a call.
var (
	errPendingFull      = errors.New("max_pending_calls")
	errPendingPerClient = errors.New("max_pending_calls_per_client")
)

// add registers a call unless the map, or the client's share of it, is
// full after expiring old calls.
func (p *pendingCalls) add(id string, c *pendingCall, now time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.calls) >= p.max || (p.maxPerClient > 0 && p.perClient[c.client] >= p.maxPerClient) {
		for k, v := range p.calls {
			if v.expired(now, p.ttl) {
				p.removeLocked(k, v)
			}
		}
	}
	if len(p.calls) >= p.max {
		return errPendingFull
	}
	if p.maxPerClient > 0 && p.perClient[c.client] >= p.maxPerClient {
		return errPendingPerClient
	}
	p.calls[id] = c
	p.perClient[c.client]++
	return nil
}

func (p *pendingCalls) get(id string, now time.Time) *pendingCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls[id]
	if c != nil && c.expired(now, p.ttl) {
		p.removeLocked(id, c)
		return nil
	}
	return c
}

func (p *pendingCalls) remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.calls[id]; c != nil {
		p.removeLocked(id, c)
	}
}

// removeLocked forgets call id and gives back its bytes; p.mu is held.
func (p *pendingCalls) removeLocked(id string, c *pendingCall) {
	delete(p.calls, id)
	if p.perClient[c.client]--; p.perClient[c.client] <= 0 {
		delete(p.perClient, c.client)
	}
	c.mu.Lock()
	p.bytes -= c.size
	c.size = 0
	c.records = nil
	c.gone = true
	c.mu.Unlock()
}

// count is the calls kept, how many of them ended, and the bytes they
// buffer.
func (p *pendingCalls) count() (calls, finished int, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.calls {
		c.mu.Lock()
		if c.done {
			finished++
		}
		c.mu.Unlock()
	}
	return len(p.calls), finished, p.bytes
}

func (c *pendingCall) expired(now time.Time, ttl time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done && now.Sub(c.finished) > ttl
}

// push adds a record unless it would take the call's unread records past
// maxResult bytes, or everyone's past maxBytes (then false: nothing
// added); force adds it anyway (the error record that ends a cut call).
func (p *pendingCalls) push(c *pendingCall, r record, final, force bool, now time.Time) bool {
	n := int64(len(r.data)) + int64(len(r.name))
	p.mu.Lock()
	defer p.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !force && ((p.maxResult > 0 && c.size+n > p.maxResult) || (p.maxBytes > 0 && p.bytes+n > p.maxBytes)) {
		return false
	}
	if c.gone {
		return true // nobody can read it any more
	}
	c.size += n
	p.bytes += n
	c.records = append(c.records, r)
	if final {
		c.done = true
		c.finished = now
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return true
}

// from returns the records from number i, whether the call is done, and
// a channel closed on the next change.
func (c *pendingCall) from(i int) ([]record, bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i = max(i-c.base, 0)
	return c.records[min(i, len(c.records)):], c.done, c.changed
}

// consumed drops the records before number i: they were sent, and a
// generator's output would otherwise pile up for as long as it runs.
func (p *pendingCalls) consumed(c *pendingCall, i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return
	}
	k := min(max(i-c.base, 0), len(c.records))
	var n int64
	for _, r := range c.records[:k] {
		n += int64(len(r.data)) + int64(len(r.name))
	}
	c.records = append([]record(nil), c.records[k:]...)
	c.base += k
	c.size -= n
	p.bytes -= n
}
