package frontdoor

// Per-call spreading: which calls of a caller session may run on another
// replica than the session's.

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/gradiopool/gradiopool/gradio"
)

// Spreadable reports whether a join of fn_index (its raw JSON) may run on
// any replica: the gateway knows from the reference app's config that the
// call keeps no state in the caller's session there. That is the case when
// the dependency exists and
//   - none of its inputs and outputs is a gr.State (or another skip_api
//     component: the server fills those from the session);
//   - it is not a streaming-input event (its chunks join the session's
//     running event) nor a gr.render function or one that gr.render made
//     (both belong to one session's page);
//   - Config.PinSessions is off and Config.PinnedEndpoints does not name
//     it (apps that key other server state on the session hash).
//
// Everything else runs on the session's replica, as does every call when
// the reference app is not known yet.
func (f *FrontDoor) Spreadable(fnIndex json.RawMessage) bool {
	if f.conf().PinSessions {
		return false
	}
	var fn int
	if json.Unmarshal(fnIndex, &fn) != nil {
		return false
	}
	// Any connected replica serving the reference app will do: their
	// configs have one shape (fingerprint.go). No connect here: a join of
	// a gateway that has none yet binds its session anyway.
	c := f.presented()
	return c != nil && f.spreadableIn(c, fn)
}

// spreadableIn is Spreadable's rule over the config c.
func (f *FrontDoor) spreadableIn(c *gradio.Config, fn int) bool {
	var d *gradio.Dependency
	for k := range c.Dependencies {
		if c.Dependencies[k].FnIndex == fn {
			d = &c.Dependencies[k]
			break
		}
	}
	if d == nil || d.Connection == "stream" || d.RenderID != nil || d.RenderedIn != nil {
		return false
	}
	for _, name := range f.conf().PinnedEndpoints {
		name = strings.TrimPrefix(strings.TrimSpace(name), "/")
		if (d.APIName != "" && name == d.APIName) || name == "#"+strconv.Itoa(fn) {
			return false
		}
	}
	for _, ids := range [][]int{d.Inputs, d.Outputs} {
		for _, id := range ids {
			if comp := c.Component(id); comp == nil || comp.IsState() {
				return false
			}
		}
	}
	return true
}
