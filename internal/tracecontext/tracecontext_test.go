package tracecontext

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// The trace context handed to an action is the W3C one of the span, and a
// carrier written down continues the trace.
func TestCarrier(t *testing.T) {
	if c := CarrierOf(context.Background()); c != (Carrier{}) {
		t.Errorf("carrier of no span: %+v", c)
	}
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ts, _ := trace.ParseTraceState("vendor=x")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	c := CarrierOf(ctx)
	if c.TraceParent != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" || c.TraceState != "vendor=x" {
		t.Errorf("carrier %+v", c)
	}
	if TraceID(ctx) != "0af7651916cd43dd8448eb211c80319c" || TraceID(context.Background()) != "" {
		t.Errorf("TraceID %q", TraceID(ctx))
	}
	back := trace.SpanContextFromContext(ContextWith(context.Background(), c))
	if !back.IsRemote() || back.TraceID() != tid || back.SpanID() != sid || back.TraceState().String() != "vendor=x" {
		t.Errorf("ContextWith: %+v", back)
	}
}
