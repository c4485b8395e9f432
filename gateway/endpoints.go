package gateway

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// maxEndpointLabels bounds the endpoint label's values: an app with more
// API endpoints than this gets "other" for the rest, so a scrape stays
// small whatever the app.
const maxEndpointLabels = 64

// Endpoint label values that are not an API name.
const (
	endpointOther = "other" // not one of the app's API names (or past the cap)
	endpointNone  = "none"  // no endpoint (a failover before any call was sent)
)

// endpointRefresh is how often the app's API names are looked up again
// when a name is not known (an app redeployed with a new endpoint).
const endpointRefresh = 30 * time.Second

// endpointSource is a Backend that knows the app's API names. The map is
// every name a call may carry (an api_name, or the front door's
// "fn_index=N") to its label (the api_name; "fn_N" for a function without
// one).
type endpointSource interface {
	EndpointLabels() map[string]string
}

// endpointLabels maps what callers send as an endpoint to a bounded label
// value: the app's API names (read from a connected replica's config), at
// most maxEndpointLabels of them; anything else is "other". A caller
// sending random endpoint names cannot grow the metrics.
type endpointLabels struct {
	mu     sync.Mutex
	source func() map[string]string
	known  map[string]string
	next   time.Time // no lookup before this (after a miss)
	now    func() time.Time
}

func (e *endpointLabels) setSource(f func() map[string]string) {
	e.mu.Lock()
	e.source = f
	e.mu.Unlock()
}

func (e *endpointLabels) label(endpoint string) string {
	endpoint = strings.TrimPrefix(endpoint, "/")
	if endpoint == "" {
		return endpointNone
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if l, ok := e.known[endpoint]; ok {
		return l
	}
	now := time.Now
	if e.now != nil {
		now = e.now
	}
	if e.source != nil && !now().Before(e.next) {
		// A miss: look the names up again (the app may not have been
		// connected yet), at most every endpointRefresh.
		e.next = now().Add(endpointRefresh)
		e.known = capLabels(e.source())
		if l, ok := e.known[endpoint]; ok {
			return l
		}
	}
	return endpointOther
}

// capLabels keeps at most maxEndpointLabels distinct labels (a source
// other than endpointLabelsOf may give more), in name order.
func capLabels(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	labels := map[string]bool{}
	out := make(map[string]string, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		l := m[name]
		if !labels[l] && len(labels) >= maxEndpointLabels {
			continue
		}
		labels[l] = true
		out[name] = l
	}
	return out
}

// endpointLabelsOf is the label map of one app config: each backend
// function by api_name and by "fn_index=N"; the first maxEndpointLabels
// functions only.
func endpointLabelsOf(cfg *gradio.Config) map[string]string {
	if cfg == nil {
		return nil
	}
	m := map[string]string{}
	n := 0
	for _, d := range cfg.Dependencies {
		if !d.BackendFn {
			continue
		}
		if n++; n > maxEndpointLabels {
			break
		}
		label := d.APIName
		if label == "" {
			label = "fn_" + strconv.Itoa(d.FnIndex)
		} else {
			m[d.APIName] = label
		}
		m["fn_index="+strconv.Itoa(d.FnIndex)] = label
	}
	return m
}

// EndpointLabels reads the API names from the first connected replica
// (every replica serves the same app; one that does not is refused by
// the front door and reported).
func (b *poolBackend) EndpointLabels() map[string]string {
	for _, name := range b.p.Replicas() {
		if app := b.p.ConnectedApp(name); app != nil {
			return endpointLabelsOf(app.Config())
		}
	}
	return nil
}
