package pool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
	"github.com/gradiopool/gradiopool/pool"
)

// traceApp records the session hashes it served (they must never be in a
// span) and has a generator, a blocking endpoint and one that fails with a
// message quoting its input.
type traceApp struct {
	mu      sync.Mutex
	hashes  []string
	started chan struct{}
}

func newTraceApp() (*traceApp, *gradiotest.App) {
	ta := &traceApp{started: make(chan struct{}, 4)}
	a := gradiotest.NewApp()
	seen := func(c *gradiotest.Call) {
		ta.mu.Lock()
		ta.hashes = append(ta.hashes, c.SessionHash)
		ta.mu.Unlock()
	}
	a.Handle("echo", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		seen(c)
		s, err := c.String(0)
		return []any{s}, err
	}, nil, nil)
	a.HandleGenerator("gen", func(ctx context.Context, c *gradiotest.Call, yield func(...any) error) error {
		seen(c)
		for i := range 3 {
			if err := yield(fmt.Sprint(i)); err != nil {
				return err
			}
		}
		return nil
	}, nil, nil)
	a.Handle("hold", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		seen(c)
		ta.started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}, nil, nil)
	a.Handle("fail", func(ctx context.Context, c *gradiotest.Call) ([]any, error) {
		seen(c)
		s, _ := c.String(0)
		return nil, gradiotest.NewError("no account for %s", s)
	}, nil, nil)
	return ta, a
}

func (ta *traceApp) sessionHashes() []string {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return slices.Clone(ta.hashes)
}

const (
	traceEmail = "Secret.Person@Example.com"
	traceToken = "hf_tracetoken_must_not_leak"
)

// tracedPool is a pool over srvs whose spans go to the returned exporter.
func tracedPool(t *testing.T, srvs []*gradiotest.Server) (*pool.Pool, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p := newPool(t, pool.Config{
		Replicas:       urls(srvs),
		TracerProvider: tp,
		ClientOptions:  []gradio.Option{gradio.WithHFToken(traceToken)},
	})
	return p, exp
}

// spanTree indexes exported spans.
type spanTree struct{ spans tracetest.SpanStubs }

func (st spanTree) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range st.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only span called name.
func (st spanTree) one(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	s := st.named(name)
	if len(s) != 1 {
		t.Fatalf("%d spans %q, want 1; spans: %v", len(s), name, st.names())
	}
	return s[0]
}

func (st spanTree) names() []string {
	var out []string
	for _, s := range st.spans {
		out = append(out, s.Name)
	}
	return out
}

// children lists the names of parent's children, by start time.
func (st spanTree) children(parent tracetest.SpanStub) []string {
	var kids tracetest.SpanStubs
	for _, s := range st.spans {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() {
			kids = append(kids, s)
		}
	}
	slices.SortStableFunc(kids, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	var out []string
	for _, s := range kids {
		out = append(out, s.Name)
	}
	return out
}

func attr(s tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// checkNoSecrets fails if any attribute, event or status of any span holds
// the e-mail (any case), the token, the user key's prefix or a session hash.
func checkNoSecrets(t *testing.T, spans tracetest.SpanStubs, hashes []string) {
	t.Helper()
	if len(hashes) == 0 {
		t.Error("the app saw no session hash: nothing to look for")
	}
	forbidden := append([]string{strings.ToLower(traceEmail), traceToken, "example.com"}, hashes...)
	check := func(where, v string) {
		for _, f := range forbidden {
			if f != "" && strings.Contains(strings.ToLower(v), strings.ToLower(f)) {
				t.Errorf("span %s: %q contains a secret (%q)", where, v, f)
			}
		}
	}
	kvs := func(where string, kv []attribute.KeyValue) {
		for _, a := range kv {
			check(where+" "+string(a.Key), a.Value.String())
		}
	}
	for _, s := range spans {
		check(s.Name+" name", s.Name)
		kvs(s.Name, s.Attributes)
		check(s.Name+" status", s.Status.Description)
		for _, e := range s.Events {
			check(s.Name+" event", e.Name)
			kvs(s.Name+" event "+e.Name, e.Attributes)
		}
	}
}

func TestTraceCall(t *testing.T) {
	ta, app := newTraceApp()
	srv := gradiotest.NewServer(app)
	t.Cleanup(srv.Close)
	p, exp := tracedPool(t, []*gradiotest.Server{srv})

	c, err := p.Submit(ctxT(t), traceEmail, "gen", "x")
	if err != nil {
		t.Fatal(err)
	}
	for range c.Events() {
	}
	if _, err := c.Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	<-c.Done() // the call span ends before the lease is released
	st := spanTree{exp.GetSpans()}
	call := st.one(t, pool.SpanCall)
	if call.Parent.IsValid() {
		t.Errorf("call span has a parent %v, want a root", call.Parent)
	}
	if got, want := st.children(call), []string{pool.SpanAcquire, pool.SpanJoin, pool.SpanQueue, pool.SpanRun, pool.SpanStream}; !slices.Equal(got, want) {
		t.Errorf("call's children = %v, want %v", got, want)
	}
	// The first call connects the replica's app inside its acquire.
	if got := st.children(st.one(t, pool.SpanAcquire)); !slices.Equal(got, []string{pool.SpanConnect}) {
		t.Errorf("acquire's children = %v, want [connect]", got)
	}
	if v, _ := attr(call, pool.AttrEndpoint); v.AsString() != "gen" {
		t.Errorf("endpoint = %q", v.AsString())
	}
	if v, _ := attr(call, pool.AttrReplica); v.AsString() != p.Replicas()[0] {
		t.Errorf("replica = %q, want %q", v.AsString(), p.Replicas()[0])
	}
	if v, _ := attr(st.one(t, pool.SpanStream), pool.AttrOutputs); v.AsInt64() != 3 {
		t.Errorf("stream outputs = %d, want 3", v.AsInt64())
	}
	for _, s := range st.spans {
		if s.Status.Code == codes.Error {
			t.Errorf("span %s failed: %s", s.Name, s.Status.Description)
		}
		if s.EndTime.Before(s.StartTime) || s.EndTime.IsZero() {
			t.Errorf("span %s not ended properly", s.Name)
		}
	}

	// A second call finds the app connected: no connect span; a plain
	// endpoint has no stream span.
	exp.Reset()
	if _, err := p.Predict(ctxT(t), traceEmail, "echo", "y"); err != nil {
		t.Fatal(err)
	}
	st = spanTree{exp.GetSpans()}
	call = st.one(t, pool.SpanCall)
	if got, want := st.children(call), []string{pool.SpanAcquire, pool.SpanJoin, pool.SpanQueue, pool.SpanRun}; !slices.Equal(got, want) {
		t.Errorf("second call's children = %v, want %v", got, want)
	}
	if len(st.named(pool.SpanConnect)) != 0 {
		t.Errorf("a connect span on a warm replica")
	}

	// An app error: the failed spans carry its kind, never its message
	// (which quotes the e-mail).
	exp.Reset()
	_, err = p.Predict(ctxT(t), traceEmail, "fail", traceEmail)
	var appErr *gradio.AppError
	if !errors.As(err, &appErr) || !strings.Contains(appErr.Message, traceEmail) {
		t.Fatalf("err = %v, want an AppError quoting the e-mail", err)
	}
	st = spanTree{exp.GetSpans()}
	call = st.one(t, pool.SpanCall)
	if call.Status.Code != codes.Error || call.Status.Description != "app_error" {
		t.Errorf("call status = %v %q, want error app_error", call.Status.Code, call.Status.Description)
	}
	if run := st.one(t, pool.SpanRun); run.Status.Code != codes.Error {
		t.Errorf("run span status = %v, want error", run.Status.Code)
	}
	checkNoSecrets(t, exp.GetSpans(), ta.sessionHashes())
}

func TestTraceFailover(t *testing.T) {
	ta, app := newTraceApp()
	srvs := []*gradiotest.Server{gradiotest.NewServer(app), gradiotest.NewServer(app)}
	for _, s := range srvs {
		t.Cleanup(s.Close)
	}
	p, exp := tracedPool(t, srvs)
	u0, _ := pinnedUsers(t, p, "echo")
	exp.Reset()
	srvs[0].FailNextJoins(1)
	res, err := p.Predict(ctxT(t), u0, "echo", "once")
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 {
		t.Fatalf("attempts = %d, want 2", res.Attempts)
	}
	st := spanTree{exp.GetSpans()}
	call := st.one(t, pool.SpanCall)
	want := []string{pool.SpanAcquire, pool.SpanJoin, pool.SpanAcquire, pool.SpanJoin, pool.SpanQueue, pool.SpanRun}
	if got := st.children(call); !slices.Equal(got, want) {
		t.Fatalf("call's children = %v, want %v", got, want)
	}
	joins := st.named(pool.SpanJoin)
	slices.SortFunc(joins, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	if joins[0].Status.Code != codes.Error || joins[0].Status.Description != "protocol_error" {
		t.Errorf("first join = %v %q, want error protocol_error", joins[0].Status.Code, joins[0].Status.Description)
	}
	if v, _ := attr(joins[0], pool.AttrReplica); v.AsString() != p.Replicas()[0] {
		t.Errorf("first join on %q, want %q", v.AsString(), p.Replicas()[0])
	}
	if v, _ := attr(joins[1], pool.AttrReplica); v.AsString() != p.Replicas()[1] || joins[1].Status.Code == codes.Error {
		t.Errorf("second join on %q (%v), want %q ok", v.AsString(), joins[1].Status.Code, p.Replicas()[1])
	}
	var failovers int
	for _, e := range call.Events {
		if e.Name == "failover" {
			failovers++
		}
	}
	if failovers != 1 || call.Status.Code == codes.Error {
		t.Errorf("call: %d failover events, status %v; want 1, ok", failovers, call.Status.Code)
	}
	if v, _ := attr(call, pool.AttrAttempts); v.AsInt64() != 2 {
		t.Errorf("attempts attribute = %d, want 2", v.AsInt64())
	}
	checkNoSecrets(t, exp.GetSpans(), ta.sessionHashes())
}

func TestTraceCancel(t *testing.T) {
	ta, app := newTraceApp()
	srv := gradiotest.NewServer(app)
	t.Cleanup(srv.Close)
	p, exp := tracedPool(t, []*gradiotest.Server{srv})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	c, err := p.Submit(ctx, traceEmail, "hold", "x")
	if err != nil {
		t.Fatal(err)
	}
	<-ta.started
	events := c.Events()
	for ev := range events {
		if ev.Kind == gradio.EventStarted {
			break // the client saw the run start
		}
	}
	cancel()
	for range events {
	}
	<-c.Done()
	st := spanTree{exp.GetSpans()}
	call := st.one(t, pool.SpanCall)
	if call.Status.Code != codes.Error || call.Status.Description != "canceled" {
		t.Errorf("call status = %v %q, want error canceled", call.Status.Code, call.Status.Description)
	}
	kids := st.children(call)
	if len(kids) == 0 || kids[len(kids)-1] != pool.SpanRun {
		t.Fatalf("call's children = %v, want the run last", kids)
	}
	if run := st.one(t, pool.SpanRun); run.Status.Description != "canceled" {
		t.Errorf("run status = %q, want canceled", run.Status.Description)
	}
	checkNoSecrets(t, exp.GetSpans(), ta.sessionHashes())
}

func TestTraceOffByDefault(t *testing.T) {
	// No provider anywhere: the global one is a no-op, calls work as before.
	srvs := replicas(t, 1)
	p := newPool(t, pool.Config{Replicas: urls(srvs)})
	if _, err := p.Predict(ctxT(t), "", "upper", "x"); err != nil {
		t.Fatal(err)
	}
}
