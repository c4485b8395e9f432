package gateway

import "time"

// SetClock replaces the gateway's clock (pending-call expiry, durations).
func (g *Gateway) SetClock(now func() time.Time) { g.now = now }
