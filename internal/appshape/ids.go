package appshape

// Component ids across replicas of one app. Gradio numbers an app's
// blocks in the order it builds them, and the releases do not build the
// same blocks: real 4.x adds a form block inside a tab that 5.x does not,
// so the same app's components after it have other ids on 4.44 than on
// 5.49 (measured on the real-gradio reference app). Callers hold the ids
// of the config the front door presents; a call that runs on a replica
// numbering them otherwise has the two ids a join and its answer carry
// mapped: the join's trigger_id (the component whose event it is) and a
// completion's changed_state_ids (the gr.State components it changed).
// Data are positional and need nothing. The shape check (Shape)
// compares components by place and type, not id, so such replicas are
// one app.

import (
	"encoding/json"
	"sync"

	"github.com/gradiopool/gradiopool/gradio"
)

// IDMaps caches the component id map between two configs (configs are
// immutable per connected app, so their pointers key it).
type IDMaps struct {
	mu sync.Mutex
	m  map[idPair]map[int]int // nil value: same ids
}

// maxIDMaps bounds the cache: a replica that reconnects brings a new
// config (a new key), so over a long run old pairs are dropped wholesale
// rather than kept forever; a dropped pair is recomputed on its next call.
const maxIDMaps = 256

type idPair struct{ from, to *gradio.Config }

// Get returns the map from the ids of from to those of to, nil when every
// id is the same (the common case: one Gradio generation).
func (c *IDMaps) Get(from, to *gradio.Config) map[int]int {
	if from == nil || to == nil || from == to {
		return nil
	}
	k := idPair{from, to}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.m[k]; ok {
		return m
	}
	if c.m == nil || len(c.m) >= maxIDMaps {
		c.m = map[idPair]map[int]int{}
	}
	m := componentIDMap(from, to)
	c.m[k] = m
	return m
}

// componentIDMap pairs the components of from and to by their place in
// each dependency of one fn_index (its targets, inputs and outputs) and
// returns from's id -> to's id for those that differ; nil when none does.
// Dependencies missing from either side pair nothing (the shape check
// refuses such a replica before any call reaches it).
func componentIDMap(from, to *gradio.Config) map[int]int {
	byFn := make(map[int]*gradio.Dependency, len(to.Dependencies))
	for i := range to.Dependencies {
		byFn[to.Dependencies[i].FnIndex] = &to.Dependencies[i]
	}
	var out map[int]int
	pair := func(a, b []int) {
		for i := 0; i < len(a) && i < len(b); i++ {
			if a[i] != b[i] {
				if out == nil {
					out = map[int]int{}
				}
				out[a[i]] = b[i]
			}
		}
	}
	for i := range from.Dependencies {
		d := &from.Dependencies[i]
		e := byFn[d.FnIndex]
		if e == nil {
			continue
		}
		pair(targetIDs(d), targetIDs(e))
		pair(d.Inputs, e.Inputs)
		pair(d.Outputs, e.Outputs)
	}
	return out
}

// targetIDs are the component ids of a dependency's triggers: config
// "targets" is [[id, "click"], ...] from Gradio 4 on, [id, ...] in 3.x.
func targetIDs(d *gradio.Dependency) []int {
	var raw struct {
		Targets []json.RawMessage `json:"targets"`
	}
	if json.Unmarshal(d.Raw, &raw) != nil {
		return nil
	}
	ids := make([]int, 0, len(raw.Targets))
	for _, t := range raw.Targets {
		var id int
		if json.Unmarshal(t, &id) == nil {
			ids = append(ids, id)
			continue
		}
		var pair []json.RawMessage
		if json.Unmarshal(t, &pair) == nil && len(pair) > 0 && json.Unmarshal(pair[0], &id) == nil {
			ids = append(ids, id)
			continue
		}
		ids = append(ids, -1) // a target without an id (e.g. a page load) keeps its place
	}
	return ids
}

// MapTriggerID rewrites a join body's trigger_id through m (presented ids
// -> the replica's); a trigger_id that is absent, null or unknown is left
// as it is.
func MapTriggerID(body map[string]json.RawMessage, m map[int]int) {
	if m == nil {
		return
	}
	var id int
	if raw, ok := body["trigger_id"]; !ok || json.Unmarshal(raw, &id) != nil {
		return
	}
	if to, ok := m[id]; ok {
		body["trigger_id"], _ = json.Marshal(to)
	}
}

// MapChangedStateIDs rewrites a relayed message's
// output.changed_state_ids through m (the replica's ids -> presented);
// data is returned unchanged when there is nothing to map.
func MapChangedStateIDs(data []byte, m map[int]int) []byte {
	if m == nil {
		return data
	}
	var msg map[string]json.RawMessage
	if json.Unmarshal(data, &msg) != nil {
		return data
	}
	var out map[string]json.RawMessage
	if json.Unmarshal(msg["output"], &out) != nil {
		return data
	}
	var ids []int
	if json.Unmarshal(out["changed_state_ids"], &ids) != nil || len(ids) == 0 {
		return data
	}
	changed := false
	for i, id := range ids {
		if to, ok := m[id]; ok {
			ids[i], changed = to, true
		}
	}
	if !changed {
		return data
	}
	out["changed_state_ids"], _ = json.Marshal(ids)
	msg["output"], _ = json.Marshal(out)
	b, err := json.Marshal(msg)
	if err != nil {
		return data
	}
	return b
}

// Inverse returns m with keys and values swapped.
func Inverse(m map[int]int) map[int]int {
	if m == nil {
		return nil
	}
	r := make(map[int]int, len(m))
	for k, v := range m {
		r[v] = k
	}
	return r
}
