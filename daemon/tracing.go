package daemon

import (
	"context"
	"iter"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/scheduler"
)

// Span names and attributes of the schedules watcher's spans.
const (
	spanScheduleApply   = "cronswap.schedule.apply"
	spanScheduleDelete  = "cronswap.schedule.delete"
	spanSchedulesReload = "cronswap.schedules.reload"
)

// editSpans traces the changes the watcher applies to the engine: a span
// per change event (change event → engine), one per full reload, and, per
// job, the span that last armed or re-armed its timer, which the job's
// fires link to (armedBy): a fire's trace says which edit made it run at
// that time. A nil *editSpans (tracing off) traces nothing.
type editSpans struct {
	tracer trace.Tracer

	mu sync.Mutex
	// current is the span of the change being applied: the watcher applies
	// one change at a time, and the engine reports what it armed
	// (applied) on the same goroutine before the sink returns.
	current trace.SpanContext
	armed   map[string]trace.SpanContext
}

// newEditSpans returns the edit spans of tracer; nil when tracer is nil.
func newEditSpans(tracer trace.Tracer) *editSpans {
	if tracer == nil {
		return nil
	}
	return &editSpans{tracer: tracer, armed: map[string]trace.SpanContext{}}
}

// sink wraps the watcher's sink with the spans; inner itself when e is nil.
func (e *editSpans) sink(inner changestream.Sink) changestream.Sink {
	if e == nil {
		return inner
	}
	return tracedSink{Sink: inner, e: e}
}

// applied is the engine's Applied hook: a job armed or re-armed (its
// timing changed) by the change being applied remembers its span.
func (e *editSpans) applied(id string, o scheduler.Outcome) {
	if e == nil || (o != scheduler.Added && o != scheduler.Replaced) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.current.IsValid() {
		e.armed[id] = e.current
	}
}

// armedBy returns the span that last armed job id's timer, if any: the
// link of the job's fires.
func (e *editSpans) armedBy(id string) (trace.SpanContext, bool) {
	if e == nil {
		return trace.SpanContext{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	sc, ok := e.armed[id]
	return sc, ok
}

// start starts the span of one change and makes it current.
func (e *editSpans) start(name string, attrs ...attribute.KeyValue) trace.Span {
	_, span := e.tracer.Start(context.Background(), name, trace.WithAttributes(attrs...))
	e.mu.Lock()
	e.current = span.SpanContext()
	e.mu.Unlock()
	return span
}

// end ends the span of the change, which is no longer current.
func (e *editSpans) end(span trace.Span) {
	e.mu.Lock()
	e.current = trace.SpanContext{}
	e.mu.Unlock()
	span.End()
}

// forget drops what is remembered of a deleted job.
func (e *editSpans) forget(id string) {
	e.mu.Lock()
	delete(e.armed, id)
	e.mu.Unlock()
}

// tracedSink is the watcher's sink inside the spans of editSpans.
type tracedSink struct {
	changestream.Sink
	e *editSpans
}

// Upsert implements changestream.Sink.
func (s tracedSink) Upsert(doc bson.Raw) {
	attrs := []attribute.KeyValue{attribute.String("job_id", jobIDOf(doc.Lookup("_id")))}
	for _, f := range []string{"cron_expr", "timezone", "updated_by"} {
		if v, ok := doc.Lookup(f).StringValueOK(); ok {
			attrs = append(attrs, attribute.String("cronswap.schedule."+f, v))
		}
	}
	span := s.e.start(spanScheduleApply, attrs...)
	defer s.e.end(span)
	s.Sink.Upsert(doc)
}

// Delete implements changestream.Sink.
func (s tracedSink) Delete(id bson.RawValue) {
	jobID := jobIDOf(id)
	span := s.e.start(spanScheduleDelete, attribute.String("job_id", jobID))
	defer s.e.end(span)
	s.Sink.Delete(id)
	s.e.forget(jobID)
}

// ReplaceAll implements changestream.Sink. The documents are counted as
// they stream through: the span gets their number when the read ends.
func (s tracedSink) ReplaceAll(docs iter.Seq2[bson.Raw, error]) ([]string, error) {
	span := s.e.start(spanSchedulesReload)
	defer s.e.end(span)
	n := 0
	changed, err := s.Sink.ReplaceAll(func(yield func(bson.Raw, error) bool) {
		for doc, err := range docs {
			if err == nil {
				n++
			}
			if !yield(doc, err) {
				return
			}
		}
	})
	span.SetAttributes(attribute.Int("cronswap.documents", n), attribute.Int("cronswap.changed", len(changed)))
	if err != nil {
		span.RecordError(err)
	}
	return changed, err
}
