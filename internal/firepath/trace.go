package firepath

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/internal/tracecontext"
)

// Span names of a fire's trace (RunnerOptions.Tracer; docs/operations.md,
// "Traces").
const (
	// SpanFire is a fire's root span, linked to the span of the schedule
	// change that armed its job (RunnerOptions.ArmedBy).
	SpanFire = "cronswap.fire"
	// SpanAdmission is the wait for the admission gate.
	SpanAdmission = "cronswap.admission"
	// SpanClaim is a fire's claim, from joining its batch to the answer,
	// linked to SpanClaimBatch.
	SpanClaim = "cronswap.claim"
	// SpanClaimBatch is one claim batch, a trace of its own.
	SpanClaimBatch = "cronswap.claim_batch"
	// SpanRun is the action; its context is the action's.
	SpanRun = "cronswap.run"
	// SpanEnd is the write of the run's end.
	SpanEnd = "cronswap.end"
)

// fireTrace is the trace of one fire: the context holding its root span,
// and its claim's span while the claim is under way. A fire that is not
// traced has none (a nil *fireTrace: one pointer in the fire).
type fireTrace struct {
	ctx   context.Context
	span  trace.Span
	claim trace.Span
}

// traceFire starts f's root span, linked to the change that armed its job;
// nothing without a tracer.
func (r *Runner) traceFire(f *fire) {
	if r.opts.Tracer == nil {
		return
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(
		attribute.String("job_id", f.jobID()),
		attribute.String("cronswap.scheduled_at", f.due.Slot.UTC().Format(time.RFC3339Nano)),
		attribute.String("cronswap.fire.kind", f.kind.name),
		attribute.String("cronswap.category", f.due.Schedule.Category))}
	if r.opts.ArmedBy != nil {
		if sc, ok := r.opts.ArmedBy(f.jobID()); ok {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc,
				Attributes: []attribute.KeyValue{attribute.String("cronswap.link", "armed_by")}}))
		}
	}
	ctx, span := r.opts.Tracer.Start(context.Background(), SpanFire, opts...)
	f.trace = &fireTrace{ctx: ctx, span: span}
}

// endTrace ends f's root span (a second End is ignored).
func (f *fire) endTrace() {
	if f.trace != nil {
		f.trace.span.End()
	}
}

// childSpan starts a span of f's trace; nil when f is not traced (and
// then nothing is allocated: a caller sets attributes on a span it got).
func (r *Runner) childSpan(f *fire, name string) trace.Span {
	if f.trace == nil {
		return nil
	}
	_, span := r.opts.Tracer.Start(f.trace.ctx, name)
	return span
}

// endSpan ends span (nil: nothing), an error status when err is set.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceID is the trace id of f's trace, "" when f is not traced.
func (f *fire) traceID() string {
	if f.trace == nil {
		return ""
	}
	return f.trace.span.SpanContext().TraceID().String()
}

// carrier is the W3C trace context of f's root span, written with its end
// (the notice it causes continues the trace); zero when f is not traced.
func (f *fire) carrier() tracecontext.Carrier {
	if f.trace == nil {
		return tracecontext.Carrier{}
	}
	return tracecontext.CarrierOf(f.trace.ctx)
}

// traceBatch starts the span of a claim batch carrying reqs[sent], and
// links each traced fire's claim to it; nil without a tracer.
func (r *Runner) traceBatch(reqs []claimRequest, sent []int) trace.Span {
	if r.opts.Tracer == nil {
		return nil
	}
	_, span := r.opts.Tracer.Start(context.Background(), SpanClaimBatch,
		trace.WithAttributes(attribute.Int("cronswap.claim_batch.size", len(sent)),
			attribute.Int("cronswap.claim_batch.late", len(reqs)-len(sent))))
	link := trace.Link{SpanContext: span.SpanContext()}
	for _, i := range sent {
		if t := reqs[i].trace; t != nil && t.claim != nil {
			t.claim.AddLink(link)
		}
	}
	return span
}

// endClaimSpan ends a fire's claim span with the claim's answer.
func endClaimSpan(span trace.Span, a claimAnswer) {
	if span == nil {
		return
	}
	if a.Err == nil && !a.nothing && !a.notQueued {
		span.SetAttributes(attribute.String("cronswap.claim.result", a.Result.String()))
	}
	endSpan(span, a.Err)
}
