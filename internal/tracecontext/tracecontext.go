// Package tracecontext is the daemon's side of OpenTelemetry, on the API
// alone (no SDK, no exporter): cronswap's tracer of a provider, and the
// W3C trace context (traceparent, tracestate) handed to actions and
// written down with a fire's end so that later spans continue its trace.
package tracecontext

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerOf returns cronswap's tracer of tp; nil when tp is nil (tracing
// off).
func TracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer("github.com/cronswap/cronswap")
}

// propagator is the W3C trace context: traceparent and tracestate.
var propagator = propagation.TraceContext{}

// Carrier is the trace context of a span as the actions are told it: the
// W3C traceparent and tracestate values.
type Carrier struct {
	TraceParent string
	TraceState  string
}

// CarrierOf returns the trace context of ctx's span; zero when ctx holds no
// valid span.
func CarrierOf(ctx context.Context) Carrier {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return Carrier{}
	}
	m := propagation.MapCarrier{}
	propagator.Inject(ctx, m)
	return Carrier{TraceParent: m.Get("traceparent"), TraceState: m.Get("tracestate")}
}

// ContextWith returns ctx with the remote span context c carries, for a
// span to continue a trace written down elsewhere (a notification's fire);
// ctx unchanged when c carries none.
func ContextWith(ctx context.Context, c Carrier) context.Context {
	if c.TraceParent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": c.TraceParent, "tracestate": c.TraceState})
}

// TraceID returns the trace id of ctx's span as hex, "" when it holds none:
// the trace_id of a fire's log lines and exemplars.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}
