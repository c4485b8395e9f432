package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Default values used for zero fields of [Backoff].
const (
	DefaultBase = 100 * time.Millisecond
	DefaultMax  = 30 * time.Second
)

// Backoff describes an exponential back-off: Base, 2*Base, 4*Base, ... capped at
// Max. The zero value uses [DefaultBase] and [DefaultMax] without jitter.
type Backoff struct {
	// Base is the first delay. Zero means DefaultBase.
	Base time.Duration
	// Max caps every delay. Zero means DefaultMax; a Max below Base is raised to Base.
	Max time.Duration
	// Jitter, between 0 and 1, takes up to that fraction off each delay at
	// random so that many clients retrying together spread out. 0 = no jitter.
	Jitter float64
}

// Delay returns the delay before retry number attempt (0 for the first retry).
// A negative attempt is treated as 0.
func (b Backoff) Delay(attempt int) time.Duration {
	base, maxd := b.Base, b.Max
	if base <= 0 {
		base = DefaultBase
	}
	if maxd <= 0 {
		maxd = DefaultMax
	}
	if maxd < base {
		maxd = base
	}
	if attempt < 0 {
		attempt = 0
	}
	d := base
	for i := 0; i < attempt && d < maxd; i++ {
		d *= 2
	}
	if d > maxd || d <= 0 { // d <= 0: overflow
		d = maxd
	}
	if j := b.Jitter; j > 0 {
		if j > 1 {
			j = 1
		}
		d -= time.Duration(rand.Float64() * j * float64(d))
	}
	return d
}

// Sleep waits for d or until ctx ends, whichever comes first, and returns
// ctx.Err() in the latter case.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
