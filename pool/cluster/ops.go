package cluster

// Redis operations, counted for the metrics and the benchmark.
const (
	opAcquire = iota
	opRelease
	opLeave
	opSync
	opHeartbeat
	opStats
	opPing
	opBye
	opAssign
	numOps
)

var opNames = [numOps]string{"acquire", "release", "leave", "sync", "heartbeat", "stats", "ping", "bye", "assign"}

// Ops returns how many Redis operations (scripts, commands or pipelines;
// one round trip each) this gateway has sent, by kind.
func (c *Coordinator) Ops() map[string]uint64 {
	out := make(map[string]uint64, numOps)
	for i := range numOps {
		out[opNames[i]] = c.ops[i].Load()
	}
	return out
}
