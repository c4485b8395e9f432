package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/appshape"
)

// The front door serves one app, the reference: at first use, the app
// most of the connected replicas serve (ties: the first in pool order). A
// replica whose app differs
// from it (another api_name, other inputs or outputs, another fn_index
// order; not another Gradio generation, see appshape.Shape) would run a caller's fn_index on the wrong
// function, so it gets no front-door session while its config differs:
// the gateway keeps serving with the replicas that match, logs the
// mismatch per replica at error level and counts it in Stats.Mismatched.
// The reference stays while at least one connected replica still serves
// it; when none does (every replica was upgraded), it is chosen again the
// same way.

// errConfigMismatch is returned (wrapped in a *mismatchError) for a
// replica whose app differs from the reference replica's.
var errConfigMismatch = errors.New("frontdoor: the replica serves a different app")

// mismatchError says which replica differs from the reference and how.
type mismatchError struct {
	Replica, Reference string
	// Diff lists a few lines of the config shape that differ ("-" only in
	// the reference, "+" only in this replica).
	Diff []string
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("frontdoor: replica %s serves a different app than replica %s (%s)", e.Replica, e.Reference, strings.Join(e.Diff, "; "))
}

func (e *mismatchError) Unwrap() error { return errConfigMismatch }

// shapeOf is a computed config shape.
type shapeOf struct {
	fp    string
	lines []string
}

// fingerprints tracks the reference app and each replica's verdict.
type fingerprints struct {
	adoptMu sync.Mutex // serialises adopt; held for no I/O

	mu         sync.Mutex // guards the fields below; nothing slow runs under it
	ref        *shapeOf   // nil until a reference is chosen
	refReplica string
	cache      map[*gradio.Config]*shapeOf        // configs are immutable per connected app
	bad        map[string]*mismatchError          // replica -> its mismatch, for its current config
	logged     map[*gradio.Config]map[string]bool // mismatches logged: config -> reference fingerprints
	checkOnce  sync.Once
	// choosing is closed when the first choice of the reference in flight
	// (ensureReference) ends; nil when none is.
	choosing chan struct{}
}

func (fp *fingerprints) init() {
	fp.cache = map[*gradio.Config]*shapeOf{}
	fp.bad = map[string]*mismatchError{}
	fp.logged = map[*gradio.Config]map[string]bool{}
}

// shape returns the (cached) shape of c; fp.mu is held.
func (fp *fingerprints) shape(c *gradio.Config) *shapeOf {
	if s := fp.cache[c]; s != nil {
		return s
	}
	if len(fp.cache) > 64 { // old apps of reconnected replicas
		clear(fp.cache)
	}
	lines := appshape.Shape(c)
	s := &shapeOf{fp: appshape.FingerprintOf(lines), lines: lines}
	fp.cache[c] = s
	return s
}

// hasReference reports whether a reference app was chosen.
func (f *FrontDoor) hasReference() bool {
	f.fps.mu.Lock()
	defer f.fps.mu.Unlock()
	return f.fps.ref != nil
}

// checkApp compares a replica's config with the reference's (none yet:
// nil) and records the verdict; a mismatch is logged once per config.
func (f *FrontDoor) checkApp(replica string, cfg *gradio.Config) error {
	fp := &f.fps
	fp.mu.Lock()
	if fp.ref == nil {
		fp.mu.Unlock()
		return nil
	}
	s := fp.shape(cfg)
	ref, refReplica := fp.ref, fp.refReplica
	if s.fp == ref.fp {
		was := fp.bad[replica] != nil
		delete(fp.bad, replica)
		fp.mu.Unlock()
		if was {
			f.log.Info("front door: replica serves the reference app again", slog.String("replica", replica), slog.String("fingerprint", s.fp))
		}
		return nil
	}
	me := &mismatchError{Replica: replica, Reference: refReplica, Diff: appshape.Diff(ref.lines, s.lines, 4)}
	fp.bad[replica] = me
	first := !fp.logged[cfg][ref.fp]
	if first {
		if len(fp.logged) > 64 {
			clear(fp.logged)
		}
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

// candidate is a connected replica's config.
type candidate struct {
	replica string
	cfg     *gradio.Config
}

// adopt makes the reference the app most of the candidates serve (ties:
// the first in pool order; cands are in pool order), and re-checks the
// others against it. why says what led to it, for the log.
func (f *FrontDoor) adopt(cands []candidate, why string) {
	if len(cands) == 0 {
		return
	}
	fp := &f.fps
	fp.mu.Lock()
	count := map[string]int{}
	for _, c := range cands {
		count[fp.shape(c.cfg).fp]++
	}
	best := cands[0]
	for _, c := range cands[1:] {
		if count[fp.shape(c.cfg).fp] > count[fp.shape(best.cfg).fp] {
			best = c
		}
	}
	old := fp.ref
	fp.ref, fp.refReplica = fp.shape(best.cfg), best.replica
	clear(fp.bad)
	fpNew := fp.ref.fp
	fp.mu.Unlock()
	attrs := []any{slog.String("replica", best.replica), slog.String("fingerprint", fpNew),
		slog.Int("replicas_serving_it", count[fpNew]), slog.Int("replicas_connected", len(cands))}
	if old == nil {
		f.log.Info("front door: reference app chosen ("+why+")", attrs...)
	} else {
		f.log.Warn("front door: new reference app ("+why+")", append(attrs, slog.String("old_fingerprint", old.fp))...)
	}
	for _, c := range cands {
		_ = f.checkApp(c.replica, c.cfg)
	}
}

// mismatched returns the replicas whose current app differs from the
// reference.
func (f *FrontDoor) mismatched() map[string]*mismatchError {
	f.fps.mu.Lock()
	defer f.fps.mu.Unlock()
	out := make(map[string]*mismatchError, len(f.fps.bad))
	for k, v := range f.fps.bad {
		out[k] = v
	}
	return out
}

// adoptGrace is how long the first choice of the reference waits for the
// other replicas once one has connected (a sleeping Space is not waited
// for: it is checked when it connects).
const adoptGrace = 2 * time.Second

// ensureReference chooses the reference app when there is none: it
// connects every replica at once, and once one has answered waits up to
// adoptGrace for the others, then takes the app most of the connected
// replicas serve.
func (f *FrontDoor) ensureReference(ctx context.Context) error {
	// One caller chooses; the others wait for its choice, each until its
	// own ctx ends (no lock is held while replicas connect), and try
	// themselves if it failed.
	for !f.hasReference() {
		fp := &f.fps
		fp.mu.Lock()
		ch, mine := fp.choosing, fp.choosing == nil
		if mine {
			ch = make(chan struct{})
			fp.choosing = ch
		}
		fp.mu.Unlock()
		if mine {
			err := f.chooseReference(ctx)
			fp.mu.Lock()
			fp.choosing = nil
			fp.mu.Unlock()
			close(ch)
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// chooseReference is ensureReference's choice, made by one caller at a
// time.
func (f *FrontDoor) chooseReference(ctx context.Context) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the connects still waited for (the pool keeps connecting)
	names := f.replicaNames()
	errc := make(chan error, len(names))
	for _, n := range names {
		go func() {
			_, err := f.p.App(cctx, n)
			errc <- err
		}()
	}
	var errs []error
	var grace <-chan time.Time
	ok := 0
wait:
	for range names {
		select {
		case err := <-errc:
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok++; ok == 1 {
				t := time.NewTimer(adoptGrace)
				defer t.Stop()
				grace = t.C
			}
		case <-grace:
			break wait
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if ok == 0 {
		return fmt.Errorf("no replica is connected: %w", errors.Join(errs...))
	}
	f.fps.adoptMu.Lock()
	f.adopt(f.connected(), "first use")
	f.fps.adoptMu.Unlock()
	f.checkAllLater()
	return nil
}

// connected lists the replicas connected now with their configs, in pool
// order.
func (f *FrontDoor) connected() []candidate {
	var cs []candidate
	for _, n := range f.replicaNames() {
		if app := f.p.ConnectedApp(n); app != nil {
			cs = append(cs, candidate{n, app.Config()})
		}
	}
	return cs
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
			for _, n := range f.replicaNames() {
				ctx, cancel := context.WithTimeout(f.ctx, 2*time.Minute)
				app, err := f.p.App(ctx, n)
				cancel()
				if err != nil {
					if f.ctx.Err() != nil {
						return
					}
					continue // checked when it connects and a session lands there
				}
				_ = f.checkApp(n, app.Config())
			}
		}()
	})
}
