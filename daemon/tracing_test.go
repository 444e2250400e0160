package daemon

import (
	"iter"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cronswap/cronswap/scheduler"
)

// armingSink stands for the engine sink: applying a document reports the
// outcome the test chose through the engine's Applied hook.
type armingSink struct {
	e       *editSpans
	outcome scheduler.Outcome
}

func (s armingSink) Upsert(doc bson.Raw) {
	s.e.applied(jobIDOf(doc.Lookup("_id")), s.outcome)
}
func (s armingSink) Delete(bson.RawValue)                                    {}
func (s armingSink) ReplaceAll(iter.Seq2[bson.Raw, error]) ([]string, error) { return nil, nil }

// Each change the watcher applies is a span; the span of the change that
// armed or re-armed a job is the one its fires link to, until another
// change re-arms it or it is deleted. A change that left the timing as it
// was (or was refused) does not take its place.
func TestEditSpansRememberWhatArmedEachJob(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	e := newEditSpans(tp.Tracer("test"))
	doc := func(id, expr string) bson.Raw {
		raw, _ := bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "cron_expr", Value: expr}, {Key: "updated_by", Value: "ops"}})
		return raw
	}
	e.sink(armingSink{e, scheduler.Replaced}).Upsert(doc("billing", "0 9 * * *"))
	first, ok := e.armedBy("billing")
	if !ok || !first.IsValid() {
		t.Fatal("no span remembered for the job a change re-armed")
	}
	e.sink(armingSink{e, scheduler.Unchanged}).Upsert(doc("billing", "0 9 * * *"))
	if sc, _ := e.armedBy("billing"); sc.SpanID() != first.SpanID() {
		t.Error("a change that kept the timing replaced the span that armed the job")
	}
	e.sink(armingSink{e, scheduler.Added}).Upsert(doc("billing", "0 8 * * *"))
	second, _ := e.armedBy("billing")
	if second.SpanID() == first.SpanID() {
		t.Error("the re-arming change's span did not replace the earlier one")
	}
	id, _ := bson.Marshal(bson.D{{Key: "_id", Value: "billing"}})
	e.sink(armingSink{e, scheduler.Added}).Delete(bson.Raw(id).Lookup("_id"))
	if _, ok := e.armedBy("billing"); ok {
		t.Error("a deleted job still has an arming span")
	}
	e.applied("other", scheduler.Added) // outside a change: nothing to remember
	if _, ok := e.armedBy("other"); ok {
		t.Error("an arming outside a change was given a span")
	}
	spans := exp.GetSpans()
	if len(spans) != 4 || spans[0].Name != spanScheduleApply || spans[3].Name != spanScheduleDelete {
		t.Fatalf("spans %v", spans)
	}
	attrs := map[string]string{}
	for _, a := range spans[2].Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["job_id"] != "billing" || attrs["cronswap.schedule.cron_expr"] != "0 8 * * *" || attrs["cronswap.schedule.updated_by"] != "ops" {
		t.Errorf("apply span attributes %v", attrs)
	}
	if spans[2].SpanContext.SpanID() != second.SpanID() {
		t.Error("the remembered span is not the change's")
	}
	var off *editSpans
	if s := off.sink(armingSink{}); s != (armingSink{}) {
		t.Error("tracing off wraps the sink")
	}
}
