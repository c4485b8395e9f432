package cluster

// Abandon stops c like a crash: its leases, heartbeat and queue places stay
// in Redis until they expire.
func (c *Coordinator) Abandon() { c.abandon() }

// LocalShare is c's local share of limit while Redis is lost.
func (c *Coordinator) LocalShare(limit int) int { return c.share(limit) }

// Rivals is how many other gateways c last saw waiting for replica.
func (c *Coordinator) Rivals(replica string) int { return int(c.limiter(replica).rivals.Load()) }
