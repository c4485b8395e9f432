package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/gradiopool/gradiopool/gateway"
)

// globalSpans installs a global tracer provider recording into memory
// until the test ends (the gateway and a pool without a provider of its
// own use the global one).
func globalSpans(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		_ = tp.Shutdown(context.Background())
	})
	return exp
}

func TestTraceparentContinued(t *testing.T) {
	exp := globalSpans(t)
	const (
		apiKey  = "api-key-must-not-leak"
		email   = "Traced.User@Example.com"
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent  = "00f067aa0ba902b7"
	)
	srv, _, _ := realGateway(t, 1, func(c *gateway.Config) { c.Secrets.APIKeys = []string{apiKey} })
	a := do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["hi"]}`,
		"Authorization", "Bearer "+apiKey, gateway.UserHeader, email,
		"traceparent", "00-"+traceID+"-"+parent+"-01")
	if a.status != http.StatusOK {
		t.Fatalf("predict: %d %s", a.status, a.body)
	}
	spans := exp.GetSpans()
	var server, call *tracetest.SpanStub
	for i := range spans {
		switch spans[i].Name {
		case "POST /v1/predict/{api_name}":
			server = &spans[i]
		case "gradiopool.call": // the pool's call span
			call = &spans[i]
		}
	}
	if server == nil || call == nil {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Fatalf("spans %v; want the request span and the pool's call span", names)
	}
	if server.SpanKind != trace.SpanKindServer || server.Parent.SpanID().String() != parent || !server.Parent.IsRemote() {
		t.Errorf("request span: kind %v, parent %v; want a server span continuing the caller's span", server.SpanKind, server.Parent)
	}
	for _, s := range spans {
		if s.SpanContext.TraceID().String() != traceID {
			t.Errorf("span %s in trace %s, want the caller's %s", s.Name, s.SpanContext.TraceID(), traceID)
		}
	}
	if call.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Errorf("the call span's parent is not the request span")
	}
	for _, s := range spans {
		for _, kv := range s.Attributes {
			v := strings.ToLower(kv.Value.String())
			if strings.Contains(v, strings.ToLower(email)) || strings.Contains(v, apiKey) || strings.Contains(v, "example.com") {
				t.Errorf("span %s attribute %s = %q holds a secret", s.Name, kv.Key, v)
			}
		}
	}
	// Without a traceparent the request starts its own trace.
	exp.Reset()
	_ = do(t, "POST", srv.URL+"/v1/predict/upper", `{"data":["hi"]}`, "Authorization", "Bearer "+apiKey)
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == traceID {
			t.Errorf("span %s reuses the previous trace", s.Name)
		}
	}
}

func TestSetupTracingFromEnvironment(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
		"OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME"} {
		t.Setenv(k, "")
	}
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	ctx := context.Background()

	// Unset: off.
	shutdown, on, err := gateway.SetupTracing(ctx)
	if err != nil || on {
		t.Fatalf("no OTEL_* set: enabled %v, %v; want off", on, err)
	}
	_ = shutdown(ctx)

	// gRPC is not built in: a clear error.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if _, _, err := gateway.SetupTracing(ctx); err == nil {
		t.Fatal("grpc protocol accepted")
	}

	// An OTLP/HTTP collector on loopback receives the spans.
	var mu sync.Mutex
	var got []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", "gateway-under-test")
	shutdown, on, err = gateway.SetupTracing(ctx)
	if err != nil || !on {
		t.Fatalf("endpoint set: enabled %v, %v", on, err)
	}
	_, span := otel.Tracer("test").Start(ctx, "exported-span")
	span.End()
	if err := shutdown(ctx); err != nil { // flushes the batch
		t.Fatalf("shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || !strings.HasPrefix(got[0], "POST /v1/traces application/x-protobuf") ||
		!strings.Contains(got[0], "exported-span") || !strings.Contains(got[0], "gateway-under-test") {
		t.Fatalf("collector received %q; want the span and the service name on POST /v1/traces", got)
	}
}
