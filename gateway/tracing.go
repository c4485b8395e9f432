package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the gateway's request spans;
// the pool's call spans are their children (the pool's "gradiopool.call").
const tracerName = "github.com/gradiopool/gradiopool/gateway"

// traceContext reads a caller's W3C traceparent (and tracestate): the
// gateway accepts it whatever the global propagator is.
var traceContext = propagation.TraceContext{}

// errTracingProtocol is returned by [SetupTracing] for an OTLP protocol
// other than http/protobuf.
var errTracingProtocol = errors.New("tracing: only the OTLP http/protobuf protocol is supported")

// tracingEnabled reports whether the standard OpenTelemetry environment asks
// for traces: an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER=otlp, and
// neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none.
func tracingEnabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(getenv("OTEL_TRACES_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// tracingProtocol refuses an OTLP protocol other than http/protobuf, naming
// the variable that asked for it.
func tracingProtocol(getenv func(string) string) error {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if proto := getenv(v); proto != "" {
			if proto != "http/protobuf" {
				return fmt.Errorf("%w (%s=%s)", errTracingProtocol, v, proto)
			}
			return nil
		}
	}
	return nil
}

// SetupTracing installs the global OpenTelemetry tracer provider from the
// standard OTEL_* environment when [tracingEnabled]: an OTLP/HTTP exporter
// (endpoint, headers, time-out, TLS from OTEL_EXPORTER_OTLP_*), a batch
// processor (OTEL_BSP_*), the sampler (OTEL_TRACES_SAMPLER) and the service
// name (OTEL_SERVICE_NAME, default "gradiopool"), and the W3C trace-context
// propagator. Otherwise it does nothing: the global provider stays a no-op
// and spans cost next to nothing. shutdown flushes and stops the exporter.
func SetupTracing(ctx context.Context) (shutdown func(context.Context) error, enabled bool, err error) {
	noop := func(context.Context) error { return nil }
	if !tracingEnabled(os.Getenv) {
		return noop, false, nil
	}
	if err := tracingProtocol(os.Getenv); err != nil {
		return noop, false, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return noop, false, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("gradiopool")), // overridden by the environment
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return noop, false, fmt.Errorf("tracing: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, true, nil
}

// serveTraced serves r under a server span that continues the caller's
// traceparent. Attributes are the method, the route pattern and the status:
// never the path's values, a header, a user or a key.
func (g *Gateway) serveTraced(w http.ResponseWriter, r *http.Request) {
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := g.tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method)))
	defer span.End()
	r = r.WithContext(ctx)
	if !span.IsRecording() {
		g.mux.ServeHTTP(w, r)
		return
	}
	sw := &spanWriter{ResponseWriter: w}
	g.mux.ServeHTTP(sw, r)
	if r.Pattern != "" { // set by the mux on r
		route := r.Pattern
		if i := strings.IndexByte(route, ' '); i >= 0 {
			route = route[i+1:]
		}
		span.SetName(r.Method + " " + route)
		span.SetAttributes(semconv.HTTPRoute(route))
	}
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	span.SetAttributes(attribute.Int(string(semconv.HTTPResponseStatusCodeKey), status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
}

// spanWriter records the status for the server span.
type spanWriter struct {
	http.ResponseWriter
	status int
}

func (s *spanWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *spanWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *spanWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *spanWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
