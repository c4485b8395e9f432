package cluster

// Abandon stops c like a crash: its leases, heartbeat and queue places stay
// in Redis until they expire.
func (c *Coordinator) Abandon() { c.abandon() }
