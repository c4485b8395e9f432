package gradiotest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Flood is an app for slow-reader tests: its "flood" generator yields N
// outputs of about Size bytes (each numbered), then runs until Gate
// closes or its call is cancelled.
type Flood struct {
	N, Size int
	Gate    <-chan struct{}
	// Yielded counts the outputs sent.
	Yielded atomic.Int32
	// Cancelled is closed when a call of it ended by its cancel (a yield
	// refused, or its context done) rather than by Gate.
	Cancelled chan struct{}
	once      sync.Once
}

// NewFlood returns a Flood of n outputs of size bytes that ends at gate.
func NewFlood(n, size int, gate <-chan struct{}) *Flood {
	return &Flood{N: n, Size: size, Gate: gate, Cancelled: make(chan struct{})}
}

// App is the app serving the flood ("flood", a Number in, a Textbox out).
func (f *Flood) App() *App {
	app := NewApp()
	app.HandleGenerator("flood", func(ctx context.Context, _ *Call, yield func(...any) error) error {
		cancelled := func(err error) error {
			f.once.Do(func() { close(f.Cancelled) })
			return err
		}
		for i := range f.N {
			if err := yield(strconv.Itoa(i) + strings.Repeat("f", f.Size)); err != nil {
				return cancelled(err)
			}
			f.Yielded.Add(1)
		}
		select {
		case <-ctx.Done():
			return cancelled(ctx.Err())
		case <-f.Gate:
			return nil
		}
	}, []Component{Number("n")}, []Component{Textbox("out")})
	return app
}
