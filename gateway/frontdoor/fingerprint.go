package frontdoor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// The front door serves one app: the config of its reference replica (the
// first replica in pool order that connects). A replica whose app differs
// from it (another api_name, other inputs or outputs, another fn_index
// order, another protocol) would run a caller's fn_index on the wrong
// function, so it gets no front-door session while its config differs:
// the gateway keeps serving with the replicas that match, logs the
// mismatch per replica at error level and counts it in Stats.Mismatched.
// The reference stays while at least one connected replica still matches
// it; when none does (every replica was upgraded), the first connected
// replica becomes the reference again.

// ErrConfigMismatch is returned (wrapped in a *MismatchError) for a
// replica whose app differs from the reference replica's.
var ErrConfigMismatch = errors.New("frontdoor: the replica serves a different app")

// MismatchError says which replica differs from the reference and how.
type MismatchError struct {
	Replica, Reference string
	// Diff lists a few lines of the config shape that differ ("-" only in
	// the reference, "+" only in this replica).
	Diff []string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("frontdoor: replica %s serves a different app than replica %s (%s)", e.Replica, e.Reference, strings.Join(e.Diff, "; "))
}

func (e *MismatchError) Unwrap() error { return ErrConfigMismatch }

// ConfigShape is the part of a Gradio config that callers depend on, one
// line per feature: the protocol, the API prefix, whether login is needed,
// and each dependency's fn_index, api_name, visibility, generator and queue
// flags and its input and output components (id and type). Volatile fields
// (app_id, root, version, labels, layout, component class hashes) are left
// out, so two replicas of one app give the same lines.
func ConfigShape(c *gradio.Config) []string {
	out := []string{
		"protocol " + c.Protocol,
		"api_prefix " + c.APIPrefix,
		"auth_required " + strconv.FormatBool(c.AuthRequired),
	}
	comp := func(ids []int) string {
		parts := make([]string, 0, len(ids))
		for _, id := range ids {
			t := "?"
			for i := range c.Components {
				if c.Components[i].ID == id {
					t = c.Components[i].Type
					break
				}
			}
			parts = append(parts, strconv.Itoa(id)+":"+t)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	for _, d := range c.Dependencies {
		name := "(no api_name)"
		if d.APIName != "" {
			name = "/" + d.APIName
		}
		q := "default"
		if d.Queue != nil {
			q = strconv.FormatBool(*d.Queue)
		}
		out = append(out, fmt.Sprintf("fn_index %d %s in %s out %s generator=%t queue=%s backend=%t private=%t undocumented=%t",
			d.FnIndex, name, comp(d.Inputs), comp(d.Outputs), d.Generator, q, d.BackendFn, d.Private, d.Undocumented))
	}
	return out
}

// Fingerprint is a short hash of [ConfigShape].
func Fingerprint(c *gradio.Config) string {
	h := sha256.Sum256([]byte(strings.Join(ConfigShape(c), "\n")))
	return hex.EncodeToString(h[:8])
}

// shapeOf is a computed config shape.
type shapeOf struct {
	fp    string
	lines []string
}

// fingerprints tracks the reference app and each replica's verdict.
type fingerprints struct {
	mu         sync.Mutex // guards the fields below; nothing slow runs under it
	ref        *shapeOf   // nil until the first replica is adopted
	refReplica string
	cache      map[*gradio.Config]*shapeOf        // configs are immutable per connected app
	bad        map[string]*MismatchError          // replica -> its mismatch, for its current config
	logged     map[*gradio.Config]map[string]bool // configs already logged per reference
	checkOnce  sync.Once
}

func (fp *fingerprints) shape(c *gradio.Config) *shapeOf {
	if s := fp.cache[c]; s != nil {
		return s
	}
	if len(fp.cache) > 64 { // old apps of reconnected replicas
		clear(fp.cache)
	}
	lines := ConfigShape(c)
	h := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	s := &shapeOf{fp: hex.EncodeToString(h[:8]), lines: lines}
	fp.cache[c] = s
	return s
}

// checkApp compares the replica's app with the reference; adopt makes it
// the reference when there is none yet.
func (f *FrontDoor) checkApp(replica string, app *gradio.Client, adopt bool) error {
	cfg := app.Config()
	fp := &f.fps
	fp.mu.Lock()
	s := fp.shape(cfg)
	if fp.ref == nil {
		if !adopt {
			fp.mu.Unlock()
			return nil // the caller made sure of a reference first
		}
		fp.ref, fp.refReplica = s, replica
		fp.mu.Unlock()
		f.log.Info("front door: reference app", slog.String("replica", replica), slog.String("fingerprint", s.fp))
		return nil
	}
	ref, refReplica := fp.ref, fp.refReplica
	if s.fp == ref.fp {
		if fp.bad[replica] != nil {
			delete(fp.bad, replica)
			fp.mu.Unlock()
			f.log.Info("front door: replica serves the reference app again", slog.String("replica", replica), slog.String("fingerprint", s.fp))
			return nil
		}
		fp.mu.Unlock()
		return nil
	}
	me := &MismatchError{Replica: replica, Reference: refReplica, Diff: shapeDiff(ref.lines, s.lines, 4)}
	fp.bad[replica] = me
	first := !fp.logged[cfg][ref.fp]
	if first {
		if fp.logged[cfg] == nil {
			fp.logged[cfg] = map[string]bool{}
		}
		fp.logged[cfg][ref.fp] = true
	}
	fp.mu.Unlock()
	if first {
		f.log.Error("front door: replica serves a different app than the reference replica; it gets no front-door sessions while it does",
			slog.String("replica", replica), slog.String("reference", refReplica),
			slog.String("fingerprint", s.fp), slog.String("reference_fingerprint", ref.fp),
			slog.String("diff", strings.Join(me.Diff, "; ")))
	}
	return me
}

// shapeDiff lists up to max lines only in a ("-") or only in b ("+").
func shapeDiff(a, b []string, max int) []string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "+ "+l)
		}
	}
	if len(out) > max {
		out = append(out[:max], fmt.Sprintf("(%d more)", len(out)-max))
	}
	return out
}

// mismatched returns the replicas whose current app differs from the
// reference.
func (f *FrontDoor) mismatched() map[string]*MismatchError {
	f.fps.mu.Lock()
	defer f.fps.mu.Unlock()
	out := make(map[string]*MismatchError, len(f.fps.bad))
	for k, v := range f.fps.bad {
		out[k] = v
	}
	return out
}

// ensureReference makes sure a reference app exists (the first replica in
// pool order that connects) before any replica is checked against it.
func (f *FrontDoor) ensureReference(ctx context.Context) error {
	f.fps.mu.Lock()
	ok := f.fps.ref != nil
	f.fps.mu.Unlock()
	if ok {
		return nil
	}
	_, _, err := f.reference(ctx)
	return err
}

// readopt makes replica's app the reference (no connected replica matches
// the old one any more).
func (f *FrontDoor) readopt(replica string, app *gradio.Client) {
	f.fps.mu.Lock()
	s := f.fps.shape(app.Config())
	old := f.fps.ref
	f.fps.ref, f.fps.refReplica = s, replica
	clear(f.fps.bad)
	f.fps.mu.Unlock()
	oldFP := ""
	if old != nil {
		oldFP = old.fp
	}
	f.log.Warn("front door: no connected replica serves the reference app any more; the app of the first connected replica is the reference now",
		slog.String("replica", replica), slog.String("fingerprint", s.fp), slog.String("old_fingerprint", oldFP))
}

// checkAllLater connects and checks every replica once, in the
// background, so that a mismatching replica is reported when the front
// door is first used, not only when a session first lands on it.
func (f *FrontDoor) checkAllLater() {
	f.fps.checkOnce.Do(func() {
		if f.ctx.Err() != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for _, n := range f.replicas {
				ctx, cancel := context.WithTimeout(f.ctx, 2*time.Minute)
				app, err := f.p.App(ctx, n)
				cancel()
				if err != nil {
					if f.ctx.Err() != nil {
						return
					}
					continue // checked when it connects and a session lands there
				}
				_ = f.checkApp(n, app, false)
			}
		}()
	})
}
