package pool

import "time"

// SetDelays shortens the internal retry and ejection delays for tests. Call
// it right after New, before the pool is used.
func SetDelays(p *Pool, connectRetry, ejectBase, ejectMax time.Duration) {
	p.cfg.connectRetryDelay = connectRetry
	p.cfg.ejectBase = ejectBase
	p.cfg.ejectMax = ejectMax
	p.cfg.trialWindow = 2 * ejectBase
}

// Names unexported from the API that the tests still check.
const (
	AttrAttempts = attrAttempts
	AttrEndpoint = attrEndpoint
	AttrOutputs  = attrOutputs
	AttrReplica  = attrReplica
	SpanAcquire  = spanAcquire
	SpanConnect  = spanConnect
	SpanJoin     = spanJoin
	SpanQueue    = spanQueue
	SpanRun      = spanRun
	SpanStream   = spanStream
)
