package pool

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/gradiopool/gradiopool/gradio"
)

// tracerName is the instrumentation scope of the pool's spans.
const tracerName = "github.com/gradiopool/gradiopool/pool"

// Span names. A call is one "gradiopool.call" span whose children say where
// its time went: each attempt's "gradiopool.acquire" (waiting for a
// session; its child "gradiopool.connect" when the replica's app had to be
// connected first) and "gradiopool.join" (the queue/join request), then
// "gradiopool.queue" (inside the Space's own queue), "gradiopool.run" (from
// the start to the first output) and "gradiopool.stream" (partial outputs
// until the end; generators only).
const (
	spanCall    = "gradiopool.call"
	spanAcquire = "gradiopool.acquire"
	spanConnect = "gradiopool.connect"
	spanJoin    = "gradiopool.join"
	spanQueue   = "gradiopool.queue"
	spanRun     = "gradiopool.run"
	spanStream  = "gradiopool.stream"
)

// Span attribute keys. None carries an e-mail, a user key, a token, a
// session hash or an app's error message (which may quote user input): a
// failure is described by its kind only (error.type, the span status).
const (
	attrEndpoint  = attribute.Key("gradiopool.endpoint")
	attrReplica   = attribute.Key("gradiopool.replica")
	attrAttempt   = attribute.Key("gradiopool.attempt")
	attrAttempts  = attribute.Key("gradiopool.attempts")
	attrRank      = attribute.Key("gradio.queue.rank")
	attrQueueSize = attribute.Key("gradio.queue.size")
	attrETA       = attribute.Key("gradio.queue.eta_ms")
	attrOutputs   = attribute.Key("gradio.outputs")
	attrErrorType = attribute.Key("error.type")
)

func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// callTrace follows one call. A nil *callTrace (the span is not recorded:
// tracing is off) does nothing, so an untraced call costs one Start.
type callTrace struct {
	tracer trace.Tracer
	ctx    context.Context // carries the call span
	span   trace.Span

	mu        sync.Mutex
	phase     trace.Span // queue, run or stream; nil before and after
	phaseName string
	outputs   int
}

// startCall starts the call span; ctx is returned unchanged when the span
// is not recorded.
func (p *Pool) startCall(ctx context.Context, endpoint string) (context.Context, *callTrace) {
	sctx, span := p.cfg.tracer.Start(ctx, spanCall, trace.WithAttributes(attrEndpoint.String(endpoint)))
	if !span.IsRecording() {
		return ctx, nil
	}
	ct := &callTrace{tracer: p.cfg.tracer, ctx: sctx, span: span}
	return sctx, ct
}

// child starts a child span of the call.
func (ct *callTrace) child(name string, attrs ...attribute.KeyValue) trace.Span {
	if ct == nil {
		return nil
	}
	_, s := ct.tracer.Start(ct.ctx, name, trace.WithAttributes(attrs...))
	return s
}

// joined starts the queue span once the app accepted the job (unless its
// events already moved the call on).
func (ct *callTrace) joined() {
	if ct == nil {
		return
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.phaseName == "" {
		ct.enterLocked(spanQueue)
	}
}

func (ct *callTrace) enterLocked(name string) {
	if ct.phase != nil {
		ct.phase.End()
	}
	_, ct.phase = ct.tracer.Start(ct.ctx, name)
	ct.phaseName = name
}

// onEvent is the job's gradio.EventHook.
func (ct *callTrace) onEvent(ev gradio.Event) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.phaseName == "done" {
		return
	}
	switch ev.Kind {
	case gradio.EventQueued:
		if ct.phaseName == "" {
			ct.enterLocked(spanQueue)
		}
		if ct.phaseName == spanQueue {
			ct.phase.SetAttributes(attrRank.Int(ev.Rank), attrQueueSize.Int(ev.QueueSize), attrETA.Int64(ev.ETA.Milliseconds()))
		}
	case gradio.EventStarted:
		if ct.phaseName != spanRun && ct.phaseName != spanStream {
			ct.enterLocked(spanRun)
		}
	case gradio.EventOutput:
		if ct.phaseName != spanStream {
			ct.enterLocked(spanStream)
		}
		ct.outputs++
	case gradio.EventCompleted, gradio.EventError:
		if ct.phase != nil {
			if ct.phaseName == spanStream {
				ct.phase.SetAttributes(attrOutputs.Int(ct.outputs))
			}
			endSpan(ct.phase, ev.Err)
		}
		ct.phase, ct.phaseName = nil, "done"
	}
}

// failover records that the call moves away from replica.
func (ct *callTrace) failover(replica string, err error) {
	if ct == nil {
		return
	}
	ct.span.AddEvent("failover", trace.WithAttributes(attrReplica.String(replica), attrErrorType.String(errorKind(err))))
}

// end ends the call span (and a phase left open) with err's kind.
func (ct *callTrace) end(replica string, attempts int, err error) {
	if ct == nil {
		return
	}
	ct.mu.Lock()
	if ct.phase != nil {
		endSpan(ct.phase, err)
		ct.phase = nil
	}
	ct.phaseName = "done"
	ct.mu.Unlock()
	if replica != "" {
		ct.span.SetAttributes(attrReplica.String(replica))
	}
	ct.span.SetAttributes(attrAttempts.Int(attempts))
	endSpan(ct.span, err)
}

// endSpan ends s (nil: nothing), marking it failed with err's kind.
func endSpan(s trace.Span, err error) {
	if s == nil {
		return
	}
	if err != nil {
		kind := errorKind(err)
		s.SetAttributes(attrErrorType.String(kind))
		s.SetStatus(codes.Error, kind)
	}
	s.End()
}

// errorKind names the kind of a call's failure without its message (which
// may quote an app's output or a user's input): "canceled",
// "deadline_exceeded", "queue_timeout", "queue_full", "closed",
// "all_replicas_failed", "replica_ejected", "app_error", "connection_lost",
// "connect_error", "space_not_running", "metadata_error", "protocol_error",
// "bad_arguments", "unknown_endpoint", "upload_too_large", "app_changed" or
// "error".
func errorKind(err error) string {
	var (
		all   *AllReplicasFailedError
		ej    *ejectedError
		app   *gradio.AppError
		lost  *gradio.ConnectionLostError
		conn  *gradio.ConnectError
		space *gradio.SpaceError
		meta  *gradio.MetadataError
		proto *gradio.ProtocolError
		arg   *gradio.ArgumentError
		big   *gradio.UploadTooLargeError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &all): // before the rest: it unwraps to every cause
		return "all_replicas_failed"
	case errors.Is(err, context.Canceled), errors.Is(err, gradio.ErrCanceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, ErrQueueTimeout):
		return "queue_timeout"
	case errors.Is(err, ErrQueueFull), errors.Is(err, gradio.ErrQueueFull):
		return "queue_full"
	case errors.Is(err, ErrClosed), errors.Is(err, gradio.ErrClosed):
		return "closed"
	case errors.As(err, &ej) && !ej.suspect(): // a hung replica's cause is its last error's kind
		return "replica_ejected"
	case errors.As(err, &app):
		return "app_error"
	case errors.As(err, &lost):
		return "connection_lost"
	case errors.As(err, &conn):
		return "connect_error"
	case errors.As(err, &space):
		return "space_not_running"
	case errors.As(err, &meta):
		return "metadata_error"
	case errors.As(err, &proto):
		return "protocol_error"
	case errors.As(err, &arg):
		return "bad_arguments"
	case errors.Is(err, gradio.ErrUnknownEndpoint):
		return "unknown_endpoint"
	case errors.As(err, &big):
		return "upload_too_large"
	case errors.Is(err, gradio.ErrAppChanged):
		return "app_changed"
	}
	return "error"
}

// getAppTraced is getApp with a connect span when the app must be
// connected first (the first call, or after a restart or an ejection).
func (r *replica) getAppTraced(ctx context.Context) (*gradio.Client, uint64, error) {
	if app, _ := r.currentApp(); app != nil || !trace.SpanFromContext(ctx).IsRecording() {
		return r.getApp(ctx)
	}
	ctx, span := r.p.cfg.tracer.Start(ctx, spanConnect, trace.WithAttributes(attrReplica.String(r.name)))
	app, gen, err := r.getApp(ctx)
	endSpan(span, err)
	return app, gen, err
}
