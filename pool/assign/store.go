package assign

import (
	"context"
	"time"

	"github.com/gradiopool/gradiopool/internal/ttlstore"
)

// ErrClosed is returned by a closed [Memory].
var ErrClosed = ttlstore.ErrClosed

// Store maps a user key to a replica name with a time to live.
//
// Implementations must be safe for concurrent use. Every method takes a context
// first because a shared implementation (e.g. Redis) does network I/O. A Get
// that finds nothing returns ok == false and a nil error; an error means the
// store could not answer, and callers (package pool) then route as if the user
// were new.
type Store interface {
	// Get returns the replica the key is assigned to, if the assignment has
	// not expired. Get does not extend the assignment.
	Get(ctx context.Context, key string) (replica string, ok bool, err error)
	// Set assigns key to replica for ttl, replacing any previous assignment and
	// its expiry (so Set also refreshes). ttl <= 0 means no expiry.
	Set(ctx context.Context, key, replica string, ttl time.Duration) error
	// Delete removes the assignment of key; deleting a missing key is no error.
	Delete(ctx context.Context, key string) error
	// Len returns the number of assignments held. It may count assignments that
	// expired since the last sweep.
	Len(ctx context.Context) (int, error)
}

// Refresher is a [Store] that can extend an assignment as it reads it, so
// that a call costs one round trip to a shared store instead of a read
// and a refresh.
type Refresher interface {
	// GetRefresh is Get; when the key is found, its expiry is also set to
	// ttl from now (ttl <= 0: left as it is).
	GetRefresh(ctx context.Context, key string, ttl time.Duration) (replica string, ok bool, err error)
}

// Claimer is a [Store] that can make a first assignment atomically, so
// that several gateways seeing a new user at the same moment agree on one
// replica. Package pool uses it, when the Store has it, for every user it
// finds unassigned.
type Claimer interface {
	// Claim assigns key to replica for ttl (<= 0: no expiry) unless key is
	// already assigned, and returns the replica key is assigned to after
	// the call: replica when the claim won, else the earlier assignment
	// (whose expiry is left as it was).
	Claim(ctx context.Context, key, replica string, ttl time.Duration) (string, error)
}
