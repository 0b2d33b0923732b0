// Package tracing holds sandgate's OpenTelemetry traces: the exporter (OTLP over HTTP,
// configured by the standard OTEL_EXPORTER_OTLP_* variables, off when no endpoint is
// set), the span of each API request, the spans of create stages, and the client
// transport that passes the trace on (traceparent) to sandbox agents.
//
// With tracing off every call here is a cheap no-op: Enabled is one atomic load, and
// spans come from OpenTelemetry's no-op provider.
package tracing

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// AttrRequestID is the attribute carrying the API request id (X-Request-ID).
const AttrRequestID = "sandgate.request_id"

var (
	enabled    atomic.Bool
	propagator = propagation.TraceContext{}
)

func tracer() trace.Tracer { return otel.Tracer("github.com/sandgate/sandgate") }

// Enabled reports whether spans are exported.
func Enabled() bool { return enabled.Load() }

// Setup starts exporting spans over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (OTEL_SDK_DISABLED=true keeps it off); it
// returns the function that flushes and stops the exporter. Call it once per process.
func Setup(ctx context.Context, service, version string) (shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if os.Getenv("OTEL_SDK_DISABLED") == "true" || (os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "") {
		return noop, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return noop, err
	}
	res := resource.NewSchemaless(semconv.ServiceName(service), semconv.ServiceVersion(version))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	enabled.Store(true)
	return tp.Shutdown, nil
}

// StartRequest starts the span of one API request, continuing a trace the client
// passed in traceparent. Call end with the route pattern once the mux has routed it.
func StartRequest(r *http.Request, requestID string) (*http.Request, func(pattern string)) {
	if !Enabled() {
		return r, func(string) {}
	}
	ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	// The span is named by the route pattern, never the path: a preview path may carry a
	// signed link's token.
	ctx, span := tracer().Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String(AttrRequestID, requestID), semconv.HTTPRequestMethodKey.String(r.Method)))
	return r.WithContext(ctx), func(pattern string) {
		if pattern != "" {
			span.SetAttributes(semconv.HTTPRoute(pattern))
			if !strings.Contains(pattern, " ") { // a route for any method
				pattern = r.Method + " " + pattern
			}
			span.SetName(pattern)
		}
		span.End()
	}
}

// Start starts a child span of ctx's.
func Start(ctx context.Context, name string) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tracer().Start(ctx, name)
}

// Record adds a finished child span of ctx's that ran from start to end (a create
// stage timed by its caller).
func Record(ctx context.Context, name string, start, end time.Time) {
	if !Enabled() || !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		return
	}
	_, span := tracer().Start(ctx, name, trace.WithTimestamp(start))
	span.End(trace.WithTimestamp(end))
}

// Inject writes ctx's trace into h (traceparent), for a request leaving the gateway.
func Inject(ctx context.Context, h http.Header) {
	if Enabled() {
		propagator.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// Transport wraps next: each request gets a client span and carries its traceparent.
func Transport(next http.RoundTripper) http.RoundTripper { return transport{next} }

type transport struct{ next http.RoundTripper }

func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !Enabled() || !trace.SpanFromContext(r.Context()).SpanContext().IsValid() {
		return t.next.RoundTrip(r)
	}
	ctx, span := tracer().Start(r.Context(), r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path)))
	defer span.End()
	r = r.Clone(ctx)
	propagator.Inject(ctx, propagation.HeaderCarrier(r.Header))
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		span.RecordError(err)
		return resp, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	return resp, nil
}

// maxServerTimings bounds the spans one answer's Server-Timing header may add: the
// agent runs inside the sandbox, so what it reports is the workload's to forge.
const maxServerTimings = 4

// RecordServerTiming turns the Server-Timing entries of a sandbox agent's answer
// ("spawn;dur=1.2") into spans "sandbox-agent.<step>" of ctx's trace, placed from start
// (when the request was forwarded) for their duration. Step names are kept to short
// lowercase words; anything else is dropped.
func RecordServerTiming(ctx context.Context, h http.Header, start time.Time) {
	if !Enabled() || !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		return
	}
	n := 0
	for _, v := range h.Values("Server-Timing") {
		for _, entry := range strings.Split(v, ",") {
			if n >= maxServerTimings {
				return
			}
			name, dur, ok := parseServerTiming(entry)
			if !ok {
				continue
			}
			n++
			Record(ctx, "sandbox-agent."+name, start, start.Add(dur))
		}
	}
}

// parseServerTiming reads one "name;dur=ms" entry.
func parseServerTiming(entry string) (string, time.Duration, bool) {
	parts := strings.Split(strings.TrimSpace(entry), ";")
	name := strings.TrimSpace(parts[0])
	if name == "" || len(name) > 32 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz-") != "" {
		return "", 0, false
	}
	for _, p := range parts[1:] {
		if v, ok := strings.CutPrefix(strings.TrimSpace(p), "dur="); ok {
			ms, err := strconv.ParseFloat(v, 64)
			if err != nil || !(ms >= 0 && ms <= 3.6e6) { // NaN fails both
				return "", 0, false
			}
			return name, time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	return "", 0, false
}
