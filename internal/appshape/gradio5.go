package appshape

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/gradiopool/gradiopool/gradio"
)

// Presented is what an older app's config is presented with as Gradio 5's.
type Presented struct {
	Version   string // the Gradio 5 release presented (e.g. "5.49.1")
	APIPrefix string // Gradio 5's API prefix ("/gradio_api")
	Root      string // the root callers reach the app at
	AppID     uint64
}

// AsGradio5 returns cfg (an app older than sse_v3) as Gradio 5 presents
// its config: protocol sse_v3, p's version, API prefix, root and app_id,
// dependency ids (before Gradio 5 the index was the id) and connections,
// connect_heartbeat as Gradio 5 computes it (any gr.State or unload
// event), and a single page when the app has none. Gradio 4's "path"
// goes: Gradio 5 has none.
func AsGradio5(cfg *gradio.Config, p Presented) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(cfg.Raw))
	dec.UseNumber()
	var c map[string]any
	if err := dec.Decode(&c); err != nil || c == nil {
		return nil, errors.New("appshape: the app's config is not a JSON object")
	}
	c["version"] = p.Version
	c["protocol"] = "sse_v3"
	c["api_prefix"] = p.APIPrefix
	c["root"] = p.Root
	c["app_id"] = json.Number(strconv.FormatUint(p.AppID, 10))
	heartbeat := cfg.ConnectHeartbeat
	var compIDs []int
	for _, comp := range cfg.Components {
		compIDs = append(compIDs, comp.ID)
		heartbeat = heartbeat || comp.IsState()
	}
	var depIDs []int
	deps, _ := c["dependencies"].([]any)
	for i, d := range deps {
		dm, ok := d.(map[string]any)
		if !ok {
			continue
		}
		if _, has := dm["id"]; !has {
			dm["id"] = i
		}
		if i >= len(cfg.Dependencies) {
			continue
		}
		if _, has := dm["connection"]; !has {
			dm["connection"] = "sse"
		}
		depIDs = append(depIDs, cfg.Dependencies[i].FnIndex)
		heartbeat = heartbeat || hasUnloadTarget(dm)
	}
	c["connect_heartbeat"] = heartbeat
	if _, ok := c["page"]; !ok {
		c["page"] = map[string]any{"": map[string]any{"layout": c["layout"], "components": compIDs, "dependencies": depIDs}}
		c["pages"] = []any{[]any{"", "Home", true}}
	}
	delete(c, "path")
	return Marshal(c), nil
}

// hasUnloadTarget reports whether a dependency is triggered by the page's
// unload event (its targets are [component id, event name] pairs).
func hasUnloadTarget(dm map[string]any) bool {
	ts, _ := dm["targets"].([]any)
	for _, t := range ts {
		if pair, ok := t.([]any); ok && len(pair) == 2 && pair[1] == "unload" {
			return true
		}
	}
	return false
}
