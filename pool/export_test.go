package pool

import (
	"context"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
)

// SetDelays shortens the internal retry and ejection delays for tests. Call
// it right after New, before the pool is used.
// SetStalledConnect sets how long a replica's connect runs before new
// users and moves avoid it (default defaultStalledConnect).
func SetStalledConnect(p *Pool, d time.Duration) { p.cfg.stalledConnect = d }

func SetDelays(p *Pool, connectRetry, ejectBase, ejectMax time.Duration) {
	p.cfg.connectRetryDelay = connectRetry
	p.cfg.ejectBase = ejectBase
	p.cfg.ejectMax = ejectMax
	p.cfg.trialWindow = 2 * ejectBase
}

// Names unexported from the API that the tests still check.
const (
	SpanCall     = spanCall
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

// Names unexported from the API (no user outside the package) that the
// external tests still check.
const (
	DefaultConnectRetries = defaultConnectRetries
	EventAssigned         = eventAssigned
	StateSuspect          = stateSuspect
)

var (
	ErrBadUser = errBadUser
	ErrEjected = errEjected
)

// AcquireFunc is Pool.acquireFunc for the external tests.
func AcquireFunc(ctx context.Context, p *Pool, user string, f func(*gradio.Client) error) error {
	return p.acquireFunc(ctx, user, f)
}

// LeaseReplica is the name of the replica serving l.
func LeaseReplica(l *Lease) string { return l.r.name }
