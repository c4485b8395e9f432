package sse

import (
	"io"
	"math"
	"runtime"
)

// Meter is a Budget's account for a stream that no Reader reads (a
// WebSocket, whose messages come in frames, not lines): its reader says
// how many bytes it holds beyond its allowance (Set), and the Budget
// treats the stream as it treats a Reader's: the same fair shares,
// reclaims and rate floor. A cut closes the stream's body; the read then
// fails, and Err says why.
type Meter struct {
	a       *account
	cleanup runtime.Cleanup
}

// NewMeter opens an account in b for the stream body; read the stream
// through the reader it returns, which counts bytes for the rate floor.
// On a part that is not a named party (Budget.Party), the stream is a
// party of its own. Release gives its bytes back (a Meter dropped without
// it gives them back when it is collected). A nil b gives a nil Meter,
// which holds nothing.
func NewMeter(body io.ReadCloser, b *Budget) (*Meter, io.Reader) {
	if b == nil {
		return nil, body
	}
	a := &account{budget: b, body: body}
	if b.root != nil {
		a.budget = b.register(a)
	}
	m := &Meter{a: a}
	m.cleanup = runtime.AddCleanup(m, (*account).refund, a)
	return m, countingReader{r: body, n: &a.read}
}

// Set makes the stream hold over bytes of the Budget in all (what its
// reader keeps beyond its allowance): it takes the growth, or gives the
// shrink back. A refusal (ErrBudgetExhausted, ErrPartyOverShare) or an
// earlier cut's cause is returned; the stream then fails.
func (m *Meter) Set(over int64) error {
	if m == nil {
		return nil
	}
	return m.a.set(max(over, 0))
}

// Err is the cause of the cut that ended the stream (ErrBudgetReclaimed,
// ErrTooSlow, ...), nil if it was not cut.
func (m *Meter) Err() error {
	if m == nil {
		return nil
	}
	return m.a.err()
}

// Release gives the stream's bytes back; the Meter must not be used
// afterwards. Safe on nil.
func (m *Meter) Release() {
	if m == nil {
		return
	}
	m.cleanup.Stop()
	m.a.refund()
}

// Hold passes what the stream is charged (a message just read in full)
// to a Hold, for its consumer to keep while it decodes and delivers it,
// as Reader.Hold does for an event: nil when the stream holds nothing.
func (m *Meter) Hold() (*Hold, error) {
	if m == nil {
		return nil, nil
	}
	st, err := m.a.lend(math.MaxInt64)
	if err != nil {
		return nil, err
	}
	if st.n == 0 {
		st.release()
		return nil, nil
	}
	return st.grow(0)
}

// Charge is Reader.Charge for the stream's consumer: n bytes it keeps
// that no message brought in. Safe on nil (nothing held).
func (m *Meter) Charge(n int) (*Hold, error) {
	if m == nil {
		return nil, nil
	}
	return m.a.charge(n)
}
