package pool

import (
	"context"
	"fmt"

	"github.com/gradiopool/gradiopool/pool/assign"
)

// claim makes the first assignment of an unassigned user when the Store is
// an [assign.Claimer] (e.g. Redis' SET NX): the next replica in round
// robin (newUserFirst: connected ones first) is proposed, and whichever gateway of a cluster proposed first
// wins, so that all of them send the user to the same replica. It returns
// nil when the Store cannot claim or fails (the user is then routed as new).
func (p *Pool) claim(ctx context.Context, key string) *replica {
	c, ok := p.store.(assign.Claimer)
	if !ok || key == "" {
		return nil
	}
	list := p.set.Load().list
	cand := p.newUserSpread(list)
	if cand == nil {
		cand = p.newUserFirst(list)
	}
	ttl := p.cfg.UserAssignmentTTL
	if ttl < 0 {
		ttl = 0
	}
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	name, err := c.Claim(sctx, key, cand.name, ttl)
	cancel()
	if err != nil {
		p.emit(Event{Kind: eventAssigned, User: keyPrefix(key), Err: fmt.Errorf("assignment store: %w", err)})
		return nil
	}
	r := p.set.Load().byName[name] // nil if the replica list changed
	if r != nil {
		p.emit(Event{Kind: eventAssigned, Replica: r.name, User: keyPrefix(key)})
	}
	return r
}
