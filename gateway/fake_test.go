package gateway_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gradiopool/gradiopool/gateway"
	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/pool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a Backend with a few endpoints, enough to exercise every answer
// of the gateway without a pool:
//
//	upper(s)   -> S
//	count(n)   generator: outputs 0..n-1
//	slow()     blocks until release is closed or ctx ends
//	fail()     gr.Error
//	full()     pool queue time-out
//	appcancel() the job cancelled at the app
//	slowreader() the job's events read too slowly (gradio.ErrSlowReader)
//	panic()    panics (with the user in the value)
type fake struct {
	release  chan struct{}
	started  chan struct{} // one value per slow call started
	canceled atomic.Int32  // slow calls ended by ctx
	inUse    atomic.Int32
	ready    atomic.Bool
	users    sync.Map // user -> true
}

func newFake() *fake {
	f := &fake{release: make(chan struct{}), started: make(chan struct{}, 16)}
	f.ready.Store(true)
	return f
}

func (f *fake) run(ctx context.Context, user, endpoint string, args []any, emit func(gradio.Event)) ([]json.RawMessage, error) {
	if user != "" {
		f.users.Store(user, true)
	}
	str := func(i int) string {
		var s string
		_ = json.Unmarshal(args[i].(json.RawMessage), &s)
		return s
	}
	switch endpoint {
	case "upper":
		if len(args) != 1 {
			return nil, &gradio.ArgumentError{Endpoint: "/upper", Msg: "want 1 argument"}
		}
		return []json.RawMessage{mustMarshal(strings.ToUpper(str(0)))}, nil
	case "count":
		var n int
		_ = json.Unmarshal(args[0].(json.RawMessage), &n)
		emit(gradio.Event{Kind: gradio.EventQueued, Rank: 0, QueueSize: 1})
		emit(gradio.Event{Kind: gradio.EventStarted})
		for i := 0; i < n; i++ {
			emit(gradio.Event{Kind: gradio.EventOutput, Data: []json.RawMessage{mustMarshal(i)}})
		}
		return []json.RawMessage{mustMarshal(n - 1)}, nil
	case "slow":
		f.inUse.Add(1)
		defer f.inUse.Add(-1)
		f.started <- struct{}{}
		select {
		case <-f.release:
			return []json.RawMessage{mustMarshal("done")}, nil
		case <-ctx.Done():
			f.canceled.Add(1)
			return nil, ctx.Err()
		}
	case "fail":
		return nil, &gradio.AppError{Title: "Oops", Message: "boom"}
	case "full":
		return nil, gradio.ErrQueueFull
	case "appcancel": // the app cancelled the job, not the caller
		return nil, gradio.ErrCanceled
	case "slowreader":
		return nil, gradio.ErrSlowReader
	case "panic":
		panic("boom with a secret: " + user)
	}
	return nil, gradio.ErrUnknownEndpoint
}

func mustMarshal(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func (f *fake) Predict(ctx context.Context, user string, _ pool.CallOptions, endpoint string, args []any) (*gateway.Result, error) {
	out, err := f.run(ctx, user, endpoint, args, func(gradio.Event) {})
	if err != nil {
		return nil, err
	}
	return &gateway.Result{Data: out, Replica: "r1", Wait: time.Millisecond}, nil
}

type fakeCall struct {
	events chan gradio.Event
	done   chan struct{}
	out    []json.RawMessage
	err    error
}

func (c *fakeCall) Replica() string             { return "r1" }
func (c *fakeCall) Waited() time.Duration       { return time.Millisecond }
func (c *fakeCall) Events() <-chan gradio.Event { return c.events }
func (c *fakeCall) Wait(ctx context.Context) ([]json.RawMessage, error) {
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fake) Submit(ctx context.Context, user string, _ pool.CallOptions, endpoint string, args []any) (gateway.Call, error) {
	switch endpoint {
	case "upper", "count", "slow", "fail", "slowreader":
	default:
		_, err := f.run(ctx, user, endpoint, args, nil)
		return nil, err
	}
	if endpoint == "upper" && len(args) != 1 {
		return nil, &gradio.ArgumentError{Endpoint: "/upper", Msg: "want 1 argument"}
	}
	c := &fakeCall{events: make(chan gradio.Event, 64), done: make(chan struct{})}
	go func() {
		c.out, c.err = f.run(ctx, user, endpoint, args, func(ev gradio.Event) { c.events <- ev })
		close(c.done)
		close(c.events)
	}()
	return c, nil
}

func (f *fake) Stats(context.Context) pool.Stats {
	return pool.Stats{Pools: map[string]pool.ReplicaStats{"r1": {InUseConnections: int(f.inUse.Load())}}, Initialized: true}
}

// UserTag names a user in logs as a pool does: a short keyed hash of the
// normalised e-mail (the key random per test binary).
func (f *fake) UserTag(user string) string {
	if user == "" {
		return ""
	}
	m := hmac.New(sha256.New, fakeTagKey[:])
	m.Write([]byte(strings.ToLower(strings.TrimSpace(user))))
	return hex.EncodeToString(m.Sum(nil)[:4])
}

var fakeTagKey = func() (k [32]byte) { _, _ = rand.Read(k[:]); return }()

func (f *fake) Gauges(context.Context) []gateway.ReplicaGauges {
	return []gateway.ReplicaGauges{{Name: "r1", Idle: 4, InUse: int(f.inUse.Load()), Max: 50, QueueTimeouts: 2}}
}

func (f *fake) Ready() bool { return f.ready.Load() }

// Pool: no pool behind this backend (the front door is off).
func (f *fake) Pool() *pool.Pool { return nil }
