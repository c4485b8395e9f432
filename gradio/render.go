package gradio

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// gr.render (Gradio 4.3x+): a render function's process_completed carries
// output.render_config, {components, dependencies, layout, render_id}: the
// blocks the function just created (real 5.49.1 also sends "page"; render
// ids start at 0). Gradio keeps them in the caller's
// session, so the client merges them into that session's view of the
// config, as the JS client's handle_render_config does: the components and
// dependencies of an earlier run of the same render id are dropped, the new
// ones added. Other sessions keep the app's config.

// renderConfig is a parsed render_config.
type renderConfig struct {
	id   int
	cfg  *Config // components and dependencies only
	none bool    // null or absent: nothing to merge
}

// parseRenderConfig parses the render_config of a process_completed
// output (output.RenderConfig); a missing or null one gives none.
func parseRenderConfig(raw json.RawMessage) (*renderConfig, error) {
	rc := bytes.TrimSpace(raw)
	if len(rc) == 0 || string(rc) == "null" {
		return &renderConfig{none: true}, nil
	}
	var head struct {
		RenderID *int `json:"render_id"`
	}
	if err := json.Unmarshal(rc, &head); err != nil {
		return nil, fmt.Errorf("render_config: %w", err)
	}
	if head.RenderID == nil {
		return nil, fmt.Errorf("render_config: no render_id")
	}
	cfg, err := ParseConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("render_config: %w", err)
	}
	return &renderConfig{id: *head.RenderID, cfg: cfg}, nil
}

// renderedIn reports whether props.rendered_in of a component is id.
func (c *Component) renderedIn(id int) bool {
	var p struct {
		RenderedIn *int `json:"rendered_in"`
	}
	return json.Unmarshal(c.Props, &p) == nil && p.RenderedIn != nil && *p.RenderedIn == id
}

// mergeRender returns a copy of base with rc merged in; base is not
// changed (other sessions and earlier readers may hold it).
func mergeRender(base *Config, rc *renderConfig) *Config {
	c := *base
	c.Components = make([]Component, 0, len(base.Components)+len(rc.cfg.Components))
	for _, comp := range base.Components {
		// Real 5.49.1 leaves props.rendered_in unset and sends the same
		// component ids again on a re-render: the new ones replace them.
		if !comp.renderedIn(rc.id) && rc.cfg.Component(comp.ID) == nil {
			c.Components = append(c.Components, comp)
		}
	}
	c.Components = append(c.Components, rc.cfg.Components...)
	c.Dependencies = make([]Dependency, 0, len(base.Dependencies)+len(rc.cfg.Dependencies))
	for _, d := range base.Dependencies {
		if d.RenderedIn == nil || *d.RenderedIn != rc.id {
			c.Dependencies = append(c.Dependencies, d)
		}
	}
	c.Dependencies = append(c.Dependencies, rc.cfg.Dependencies...)
	c.byID = make(map[int]*Component, len(c.Components))
	for i := range c.Components {
		c.byID[c.Components[i].ID] = &c.Components[i]
		// As the JS client: a rendered gr.State asks for the heartbeat.
		if c.Components[i].Type == "state" {
			c.ConnectHeartbeat = true
		}
	}
	return &c
}

// config is this session's view of the app's config: the app's own, plus
// whatever gr.render functions rendered in this session.
func (s *appSession) config() *Config {
	if c := s.rendered.Load(); c != nil {
		return c
	}
	return s.app.cfg
}

// applyRenderLocked merges a completion's render_config into the session's
// config. Callers hold s.mu, which serialises merges.
func (s *appSession) applyRenderLocked(raw json.RawMessage) {
	rc, err := parseRenderConfig(raw)
	if err != nil {
		s.app.log.Warn("gradio: ignoring a malformed render_config", "base", s.app.base, "err", err)
		return
	}
	if rc.none {
		return
	}
	s.rendered.Store(mergeRender(s.config(), rc))
}
