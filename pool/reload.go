package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// errRemoved: the replica was taken out of the list by Reconfigure; the
// caller moves on to the next one.
var errRemoved = errors.New("pool: replica removed by a reconfiguration")

// replicaSet is one version of the replica list. Reconfigure stores a new
// one; none is changed after it was stored, so a caller that loaded one
// routes over a consistent list.
type replicaSet struct {
	list   []*replica          // configuration order: what new calls are routed over
	byName map[string]*replica // the replicas of list
	// removed are replicas taken out by Reconfigure whose calls in flight
	// have not all ended: App and ConnectedApp still find them (a
	// front-door call's event stream opens after its join), routing not.
	removed []*replica
}

func (s *replicaSet) add(r *replica) {
	s.list = append(s.list, r)
	s.byName[r.name] = r
}

// find returns the named replica, listed or still draining.
func (s *replicaSet) find(name string) *replica {
	if r := s.byName[name]; r != nil {
		return r
	}
	for _, r := range s.removed {
		if r.name == name {
			return r
		}
	}
	return nil
}

// liveSettings are the settings Reconfigure may change: read through
// Pool.live wherever they are used after New.
type liveSettings struct {
	minConns, maxConns, maxWaiters int
	queueTimeout, idleTimeout      time.Duration
}

func (s settings) liveSettings() *liveSettings {
	return &liveSettings{minConns: s.MinConnections, maxConns: s.maxConns, maxWaiters: s.MaxWaiters,
		queueTimeout: s.QueueTimeout, idleTimeout: s.IdleTimeout}
}

func (l *liveSettings) sessionLimits() sessionpool.Config[*gradio.Client] {
	return sessionpool.Config[*gradio.Client]{MinSessions: l.minConns, MaxSessions: l.maxConns,
		MaxWaiters: l.maxWaiters, QueueTimeout: l.queueTimeout, IdleTimeout: l.idleTimeout}
}

// checkReplicas validates the fields of cfg that New and Reconfigure share.
func checkReplicas(cfg Config) error {
	if len(cfg.Replicas) == 0 {
		return errors.New("pool: Config.Replicas is empty")
	}
	seen := map[string]bool{}
	for _, r := range cfg.Replicas {
		r = strings.TrimSpace(r)
		if r == "" {
			return errors.New("pool: empty replica in Config.Replicas")
		}
		k := srcKey(r)
		if seen[k] {
			return fmt.Errorf("pool: replica %q listed twice", publicSource(r))
		}
		seen[k] = true
	}
	if cfg.MaxConnections < 0 {
		return fmt.Errorf("pool: MaxConnections %d is negative", cfg.MaxConnections)
	}
	return nil
}

// srcKey is what makes two configured sources the same replica.
func srcKey(src string) string { return strings.TrimRight(strings.TrimSpace(src), "/") }

// Reconfigure changes the pool in place to cfg's Replicas, MinConnections,
// MaxConnections, MaxWaiters, QueueTimeout and IdleTimeout: what a
// configuration reload may change. The other fields of cfg are not read;
// they keep the values given to New. Nothing in flight is cut:
//
//   - A replica still listed (the same Space id or URL) keeps its name, its
//     warm sessions, its health state and its users (assignments and
//     sticky sessions).
//   - A replica added takes calls at once; it connects in the background
//     if the pool is initialised (else at the first call, like the others).
//   - A replica no longer listed takes no new call: callers waiting in its
//     queue move on to the other replicas, its calls in flight finish, and
//     then it is closed. Its users are routed as new users.
//   - Sizes and time-outs apply to every replica: see
//     [sessionpool.Pool.SetLimits] (calls in use are never cut; waiters
//     keep their deadline).
//
// On an error (a bad cfg, ErrClosed) nothing changed.
func (p *Pool) Reconfigure(cfg Config) error {
	if err := checkReplicas(cfg); err != nil {
		return err
	}
	live := cfg.withDefaults().liveSettings()
	p.reconfMu.Lock()
	defer p.reconfMu.Unlock()
	if p.closed.Load() {
		return ErrClosed
	}
	old := p.set.Load()
	kept := map[string]*replica{}
	used := map[string]bool{}
	for _, r := range old.list {
		kept[srcKey(r.src)] = r
		used[r.name] = true
	}
	for _, r := range old.removed {
		used[r.name] = true
	}
	set := &replicaSet{byName: map[string]*replica{}}
	var added []*replica
	for _, src := range cfg.Replicas {
		src = strings.TrimSpace(src)
		if r := kept[srcKey(src)]; r != nil {
			delete(kept, srcKey(src))
			set.add(r)
			continue
		}
		name := replicaName(src)
		for i := 2; used[name]; i++ {
			name = replicaName(src) + "#" + strconv.Itoa(i)
		}
		used[name] = true
		r, err := newReplica(p, src, name, live)
		if err != nil {
			for _, r := range added {
				_ = r.sp.Close(context.Background()) // never used: returns at once
			}
			return fmt.Errorf("pool: replica %s: %w", name, err)
		}
		added = append(added, r)
		set.add(r)
	}
	var errs []error
	for _, r := range set.list {
		if !slices.Contains(added, r) {
			if err := r.sp.SetLimits(live.sessionLimits()); err != nil {
				errs = append(errs, fmt.Errorf("replica %s: %w", r.name, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		// checkReplicas and withDefaults leave nothing SetLimits refuses.
		return fmt.Errorf("pool: %w", err)
	}
	set.removed = slices.Clone(old.removed)
	for _, r := range old.list {
		if kept[srcKey(r.src)] == r {
			set.removed = append(set.removed, r)
		}
	}
	p.live.Store(live)
	p.set.Store(set)

	for _, r := range added {
		p.logInfo("replica added", slog.String("replica", r.name), slog.String("source", publicSource(r.src)))
		switch {
		case p.initialized.Load():
			p.warmReplica(r)
		case p.checkStarted.Load():
			p.goBackground(func() { _, _, _ = r.getApp(p.ctx) })
		}
	}
	for _, r := range set.removed[len(old.removed):] {
		r.mu.Lock()
		r.removed = true
		r.mu.Unlock()
		p.sticky.dropReplica(r) // each reservation is closed after its call in flight
		st := r.sp.Stat()
		p.logInfo("replica removed: draining", slog.String("replica", r.name),
			slog.Int("in_use", st.InUse), slog.Int("waiting_moved", st.Waiting))
		p.goBackground(func() { p.drain(r) })
	}
	return nil
}

// drain closes a replica that Reconfigure removed once its calls in flight
// have ended (or the Pool closes), then forgets it.
func (p *Pool) drain(r *replica) {
	// Waiters get ErrPoolClosed at once and move on (failover.go); the
	// sessions in use are closed as their calls release them.
	_ = r.sp.Close(p.ctx)
	r.mu.Lock()
	r.closed = true
	app := r.app
	r.app = nil
	r.mu.Unlock()
	if app != nil {
		_ = app.Close()
	}
	p.reconfMu.Lock()
	old := p.set.Load()
	set := &replicaSet{list: old.list, byName: old.byName}
	for _, x := range old.removed {
		if x != r {
			set.removed = append(set.removed, x)
		}
	}
	p.set.Store(set)
	p.reconfMu.Unlock()
	p.logInfo("replica drained and closed", slog.String("replica", r.name))
}

// warmReplica connects r and opens its minimum sessions in the background.
func (p *Pool) warmReplica(r *replica) {
	p.goBackground(func() {
		if _, _, err := r.getApp(p.ctx); err != nil {
			return // recorded (ejected); retried on demand
		}
		r.sp.Warm()
	})
}

// isRemoved reports whether Reconfigure took r out of the list.
func (r *replica) isRemoved() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removed
}

func (p *Pool) logInfo(msg string, attrs ...slog.Attr) {
	if l := p.cfg.Logger; l != nil {
		l.LogAttrs(context.Background(), slog.LevelInfo, msg, attrs...)
	}
}
