package pool

import (
	"sync"
	"time"
)

// Users come back. Signed-in users stay on their replica (stickiness
// first), so the users of a replica that failed or restarted stay where
// they moved for their whole assignment TTL: after a rolling restart of
// three replicas the last one restarted held none (22/8/0). userSpread
// counts the signed-in users this gateway saw calling, per replica, over
// the assignment window, and routing uses it twice:
//
//   - a new user goes to the emptiest replica while one holds under
//     spreadFloor of its share (the users seen over the replicas), else
//     round robin;
//   - a user pinned to a replica above its share moves, at their next
//     call, to a replica under spreadFloor of its share, when the user holds no
//     session state there (no sticky session: see Config.StickySessions;
//     without it every call runs on a fresh session anyway).
//
// A gateway of a cluster counts the users it sees; the others count
// theirs, which moves users toward balance the same way.

// spreadFloor: a replica holding under this fraction of its share of the
// users is far below the others (new users go there; users above their
// share move there).
const spreadFloor = 0.75

// spreadMin is the fewest users a replica must lack to be far below.
const spreadMin = 2

// defaultSpreadWindow is the window when assignments never expire.
const defaultSpreadWindow = time.Hour

// userSpread is the signed-in users seen per replica name.
type userSpread struct {
	window time.Duration

	mu        sync.Mutex // guards the fields below
	where     map[string]spreadEntry
	count     map[string]int
	lastSweep time.Time
}

type spreadEntry struct {
	replica string
	seen    time.Time
}

func newUserSpread(ttl time.Duration) *userSpread {
	if ttl <= 0 {
		ttl = defaultSpreadWindow
	}
	return &userSpread{window: ttl, where: map[string]spreadEntry{}, count: map[string]int{}}
}

// note records that user key called on replica at now.
func (s *userSpread) note(key, replica string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.where[key]; ok {
		s.count[old.replica]--
	}
	s.where[key] = spreadEntry{replica: replica, seen: now}
	s.count[replica]++
	s.sweepLocked(now)
}

// sweepLocked forgets users not seen for the window, at most every tenth
// of it (a full scan).
func (s *userSpread) sweepLocked(now time.Time) {
	if now.Sub(s.lastSweep) < s.window/10 {
		return
	}
	s.lastSweep = now
	for k, e := range s.where {
		if now.Sub(e.seen) >= s.window {
			delete(s.where, k)
			s.count[e.replica]--
		}
	}
}

// counts returns the users per replica name among names, and their total.
func (s *userSpread) counts(names []*replica) (map[*replica]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[*replica]int, len(names))
	total := 0
	for _, r := range names {
		n := max(s.count[r.name], 0)
		out[r] = n
		total += n
	}
	return out, total
}

// emptiest returns the usable, connected replica with the fewest users
// when it holds under spreadFloor of its share (total over the replicas),
// else nil.
// mine, when not nil, is the user's own replica, counted without them.
func (p *Pool) emptiest(list []*replica, mine *replica) (best *replica, bestN, share float64) {
	if len(list) < 2 {
		return nil, 0, 0
	}
	cnt, total := p.spread.counts(list)
	if mine != nil && cnt[mine] > 0 {
		cnt[mine]--
		total--
	}
	share = float64(total) / float64(len(list))
	now := time.Now()
	for _, r := range list {
		if r == mine || !r.usable(now) || r.connectInFlight() {
			continue
		}
		if app, _ := r.currentApp(); app == nil || !r.ready() {
			continue
		}
		if n := float64(cnt[r]); best == nil || n < bestN {
			best, bestN = r, n
		}
	}
	// Far below: under spreadFloor of the share, and by spreadMin users
	// at least (a few users are spread by the round robin alone).
	if best == nil || bestN >= share*spreadFloor || share-bestN < spreadMin {
		return nil, 0, share
	}
	return best, bestN, share
}

// newUserSpread is newUserFirst's exception: the emptiest replica while
// one is far below its share, else nil.
func (p *Pool) newUserSpread(list []*replica) *replica {
	r, _, _ := p.emptiest(list, nil)
	return r
}

// moveBack returns the replica a user pinned to assigned moves to for
// balance, or assigned: assigned holds more than its share, another is far
// below it, and the user keeps no session state on assigned.
func (p *Pool) moveBack(list []*replica, key string, assigned *replica) *replica {
	if key == "" || p.sticky.has(key) {
		return assigned
	}
	to, _, share := p.emptiest(list, assigned)
	if to == nil {
		return assigned
	}
	cnt, _ := p.spread.counts([]*replica{assigned})
	if float64(cnt[assigned]) <= share {
		return assigned
	}
	return to
}
