package frontdoor

// Stats are the front door's numbers for pool-stats and metrics.
type Stats struct {
	// Open is the caller sessions known now; Pinned counts them per
	// replica (bound by a first join).
	Open   int            `json:"openSessions"`
	Pinned map[string]int `json:"pinnedSessions"`
	// InFlight is the calls holding a slot now.
	InFlight int `json:"callsInFlight"`
	// Cumulative since start.
	Created uint64 `json:"sessionsCreated"`
	Expired uint64 `json:"sessionsExpired"`
	Joins   uint64 `json:"joins"`
	Refused uint64 `json:"joinsRefused"`
	// CallerFaults counts joins the app refused for the caller's input
	// (answered 4xx, never retried, never counted against a replica).
	CallerFaults uint64 `json:"joinsRefusedInput"`
	// Queued counts joins answered with the gateway's event id because
	// they had to wait for a slot (shown their place, see queued.go).
	Queued    uint64 `json:"joinsQueued"`
	Moved     uint64 `json:"sessionsMoved"`
	StateLost uint64 `json:"stateLost"`
	Lost      uint64 `json:"callsLost"`
	// NotRead counts calls cancelled because no data stream was opened
	// for them within Config.ReadGrace.
	NotRead uint64 `json:"callsNotRead"`
	// SessionsRefused counts new sessions refused by MaxSessions or
	// MaxSessionsPerClient.
	SessionsRefused uint64 `json:"sessionsRefused"`
	Uploads         int    `json:"uploadsKept"`
	UploadBytes     int64  `json:"uploadBytesKept"`
	// Mismatched maps each replica whose app differs from the reference
	// replica's (it gets no front-door session) to how it differs.
	Mismatched map[string]string `json:"configMismatch,omitempty"`
}

// Stats returns a snapshot.
func (f *FrontDoor) Stats() Stats {
	st := Stats{Pinned: map[string]int{}}
	for _, n := range f.replicaNames() {
		st.Pinned[n] = 0
	}
	list := f.sessionList()
	st.Open = len(list)
	for _, s := range list {
		s.mu.Lock()
		if s.bind.Replica != "" {
			st.Pinned[s.bind.Replica]++
		}
		st.InFlight += len(s.calls)
		s.mu.Unlock()
	}
	st.Created = f.stats.created.Load()
	st.Expired = f.stats.expired.Load()
	st.Joins = f.stats.joins.Load()
	st.Refused = f.stats.refused.Load()
	st.CallerFaults = f.stats.callerFaults.Load()
	st.Queued = f.stats.queued.Load()
	st.Moved = f.stats.moved.Load()
	st.StateLost = f.stats.stateLost.Load()
	st.Lost = f.stats.lost.Load()
	st.NotRead = f.stats.notRead.Load()
	st.SessionsRefused = f.stats.sessionsRefused.Load()
	st.Uploads = f.ups.Count()
	st.UploadBytes = f.ups.Bytes()
	for n, me := range f.mismatched() {
		if st.Mismatched == nil {
			st.Mismatched = map[string]string{}
		}
		st.Mismatched[n] = me.Error()
	}
	return st
}
