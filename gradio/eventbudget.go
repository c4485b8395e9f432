package gradio

import (
	"cmp"
	"io"

	"github.com/gradiopool/gradiopool/internal/sse"
)

// EventBudget bounds the bytes that the Clients sharing it hold, in total,
// in events and messages of their apps read only in part (a data stream's
// unfinished line or event, a WebSocket message of Gradio 3), beyond a
// small allowance per stream (64 KiB). One event stays bounded by its own
// limit (64 MiB); the budget bounds their sum, which a hostile replica
// answering every stream with an endless line would otherwise drive to
// that limit times the calls in flight. Past it, the stream's calls end
// with a *ProtocolError wrapping ErrEventTooLarge, as for one event over
// its limit.
//
// A job's result larger than the allowance stays counted once decoded,
// charged to its call's party in place of the event it came in, until
// Job.Release (Predict releases its own): a caller's results not yet
// delivered count against its share like its streams, and one taken back
// for another party's room fails Wait as a cut stream does. So do a
// generator's outputs waiting for a slow Events reader, past 64 KiB a
// job, until read. A caller whose waiting outputs and results keep more
// of the budget than its streams read is to blame when room runs out
// (ErrEventShare), not its app.
//
// Each connected app (a replica) is one party of the budget, and each
// party of a session (SetEventParty: a caller; by default the session) one
// party of its app's share: when it is full, an app under its fair share
// (the total over the apps reading streams) takes room back from the app
// most over its own, and a caller under its share of its app's from the
// caller of that app most over its own; the loser's largest stream fails.
// A party over its share at every level fails its own stream. The failure
// is the app's (ErrEventTooLarge), or the caller's (ErrEventShare) when
// that caller ran more streams on the app than its other callers. A stream that
// holds bytes of it must also read at least 32 KiB/s over each 10 s
// (SetRateFloor), or it fails: a replica cannot hold its share by
// trickling an event a byte at a time.
//
// Held and Total report its use; Take and Give are the readers'.
type EventBudget = sse.Budget

// DefaultEventBudgetBytes is the size of the budget that every Client
// without WithEventBudget shares in a process: room for two events at
// the 64 MiB limit being read at once (each is held about twice its size
// while it is read: its line, then its data).
const DefaultEventBudgetBytes = 256 << 20

// ErrEventTooLarge: an event (or line, or WebSocket message) of the app was
// larger than its limit, or than what the Client's EventBudget had left.
// A replica's fault: the calls of its stream end with it, wrapped in a
// *ProtocolError or *ConnectionLostError.
var ErrEventTooLarge = sse.ErrEventTooLarge

// defaultEventBudget is shared by every Client of the process that has no
// budget of its own.
var defaultEventBudget = sse.NewBudget(DefaultEventBudgetBytes)

// NewEventBudget returns a budget of total bytes to share between Clients
// (WithEventBudget); total <= 0 returns nil: no total limit.
func NewEventBudget(total int64) *EventBudget { return sse.NewBudget(total) }

// WithEventBudget makes the Client charge the events it holds in part to
// b, shared with the other Clients given b (a pool gives it to each of its
// replicas' Clients). Nil: no total limit, only each event's own.
// Default: one budget of DefaultEventBudgetBytes for the whole process.
func WithEventBudget(b *EventBudget) Option {
	return func(s *settings) { s.eventBudget, s.ownBudget = b, true }
}

// EventBudget returns the budget the Client charges (nil: none), for
// whatever else reads the app's streams on its behalf (the gateway's
// front door relays them).
func (c *Client) EventBudget() *EventBudget { return c.app.eventBudget() }

// eventBudget is the app's part of its budget: the app is one party of
// it, whose fair share is the budget over the parties reading streams. A
// part under its share takes room back from one over its own, whose
// largest stream then fails (ErrEventTooLarge): a hostile replica's
// failures stay its own, not its neighbours'.
func (a *app) eventBudget() *sse.Budget {
	a.budgetOnce.Do(func() {
		root := defaultEventBudget
		if a.set.ownBudget {
			root = a.set.eventBudget
		}
		a.budget = root.Part()
	})
	return a.budget
}

// SetEventParty names the party (a caller: a gateway's API key, a user,
// an address) that this session's event streams are charged to inside
// its app's part of the event budget. The streams of every session with
// the same party, on every app sharing the budget, share one caller's
// fair share of the whole budget: when it is full, a party within its
// share takes room back from the one most over its own, wherever that
// one's streams are, and a party running parallel streams over its share
// (or more streams than the app's others) fails with ErrEventShare, its
// own fault, not the app's.
// Default (""): the session is a party of its own. It applies to the
// streams (and Gradio 3 WebSocket connections) opened after it.
func (c *Client) SetEventParty(key string) {
	c.sess.mu.Lock()
	c.sess.party = key
	c.sess.mu.Unlock()
}

// ErrEventShare ends a call whose stream was cut, or refused room in the
// EventBudget, because the call's party (SetEventParty) held more than its
// fair share (of the whole budget, its streams on every app of it
// counted together) while running parallel streams: the caller's fault,
// not the app's. It wraps ErrEventTooLarge.
var ErrEventShare = sse.ErrPartyOverShare

// eventReader reads an event stream of the session, charged to its
// party's part of its app's budget.
func (s *appSession) eventReader(body io.Reader) *sse.Reader {
	return sse.NewReaderBudget(body, 0, s.eventParty())
}

// eventParty is the session's party in its app's part of the budget.
func (s *appSession) eventParty() *sse.Budget {
	s.mu.Lock()
	key := cmp.Or(s.party, "session:"+s.hash)
	s.mu.Unlock()
	return s.app.eventBudget().Party(key)
}

// holdEvent charges what decoding an event of the stream read by r keeps
// (its output, about the event's size) to the stream's party, for an
// event past the reader's allowance: from the moment it is decoded until
// the job that takes it is released (Job.Release), a large output counts
// against its caller's fair share of the budget as it did while it was
// read. nil for a small event. An error (no room, the caller over its
// share, the stream cut) ends the stream as a refused read does.
func holdEvent(r *sse.Reader, data []byte) (*sse.Hold, error) {
	if len(data) <= sse.DefaultAllowance {
		return nil, nil
	}
	return r.Hold(len(data))
}

// decodeHeld decodes one event of the stream read by r into a message
// holding its charge (holdEvent); a message that does not decode holds
// nothing.
func decodeHeld(r *sse.Reader, data []byte) (*message, error) {
	h, err := holdEvent(r, data)
	if err != nil {
		return nil, err
	}
	m, err := decodeMessage(data)
	if err != nil {
		h.Release()
		return nil, err
	}
	m.hold, m.src = h, r
	return m, nil
}
