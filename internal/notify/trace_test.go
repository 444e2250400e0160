package notify

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A notice written with a traced fire's end carries its trace context to
// the notification, and the delivery's span continues that trace (a
// child of the fire's span), whichever relay delivers it; a relay without
// a tracer makes no span.
func TestDeliverySpanContinuesTheFiresTrace(t *testing.T) {
	f := newFixture(t)
	s := newSink(t)
	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	doc := bson.D{{Key: "_id", Value: "job0@2026-01-01T00:00:00Z"}, {Key: "job_id", Value: "job0"},
		{Key: "status", Value: "failed"}, {Key: "error", Value: "exit status 3"},
		TracedOutbox(KindFailed, time.Now(), "00-"+traceID+"-"+spanID+"-01", "cronswap=1")}
	if _, err := f.runs.InsertOne(context.Background(), doc); err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	start(t, f.relay("a", s, func(o *Options) { o.Tracer = tp.Tracer("test") }))
	waitFor(t, 20*time.Second, "the notification delivered", func() bool { return len(f.byStatus(t, StatusDelivered)) == 1 })
	if d := f.byStatus(t, StatusDelivered)[0]; d.TraceParent == "" || d.TraceState != "cronswap=1" {
		t.Errorf("notification's trace context %q %q, want the notice's", d.TraceParent, d.TraceState)
	}
	waitFor(t, 10*time.Second, "the delivery's span", func() bool { return len(exp.GetSpans()) == 1 })
	sp := exp.GetSpans()[0]
	if sp.Name != SpanDeliver || sp.SpanContext.TraceID().String() != traceID || sp.Parent.SpanID().String() != spanID {
		t.Errorf("delivery span %s in trace %s under %s, want %s under the fire's span %s in trace %s",
			sp.Name, sp.SpanContext.TraceID(), sp.Parent.SpanID(), SpanDeliver, spanID, traceID)
	}
}
