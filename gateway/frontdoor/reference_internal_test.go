package frontdoor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

// blockedPool is a pool of one replica whose connect waits for release.
type blockedPool struct {
	connecting chan struct{} // closed by the first App
	release    chan struct{}
}

func (p *blockedPool) Replicas() []string { return []string{"r1"} }
func (p *blockedPool) App(ctx context.Context, _ string) (*gradio.Client, error) {
	select {
	case <-p.connecting:
	default:
		close(p.connecting)
	}
	select {
	case <-p.release:
		return nil, errors.New("connection refused")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
func (p *blockedPool) ConnectedApp(string) *gradio.Client { return nil }
func (p *blockedPool) Reserve(context.Context, string, pool.ReserveOptions) (*pool.Slot, error) {
	return nil, errors.New("no slot")
}
func (p *blockedPool) QueueTimeout() time.Duration { return 0 }
func (p *blockedPool) UserTag(u string) string     { return u }

// TestReferenceWaitEndsWithItsCaller: while one caller's choice of the
// reference app waits for a replica to connect, another caller waiting
// for that choice gives up when its own request ends, not when the
// connect does (a lock held across the connect kept it).
func TestReferenceWaitEndsWithItsCaller(t *testing.T) {
	p := &blockedPool{connecting: make(chan struct{}), release: make(chan struct{})}
	f, err := New(p, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	first := make(chan error, 1)
	go func() { first <- f.ensureReference(context.Background()) }()
	<-p.connecting
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() { second <- f.ensureReference(ctx) }()
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the second caller: %v, want its context's end", err)
		}
	case <-time.After(10 * time.Second): // a hang guard, not a timing
		t.Fatal("the second caller still waits for the first one's connect after its request ended")
	}
	close(p.release)
	if err := <-first; err == nil {
		t.Error("the first caller chose a reference with no replica connected")
	}
}
