package notify

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/internal/tracecontext"
)

// SpanDeliver is the name of a delivery's span.
const SpanDeliver = "cronswap.notification.deliver"

// startDelivery starts the span of delivering c, a child of the span that
// caused its notice when the notice carries one; nil without a tracer.
func (r *Relay) startDelivery(ctx context.Context, c claimed) trace.Span {
	if r.o.Tracer == nil {
		return nil
	}
	_, span := r.o.Tracer.Start(tracecontext.ContextWith(context.WithoutCancel(ctx), c.trace), SpanDeliver,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("job_id", c.jobID), attribute.String("cronswap.notification.id", c.id),
			attribute.String("cronswap.notification.sink", c.sink), attribute.Int("cronswap.notification.attempt", int(c.attempts))))
	return span
}

// endDelivery ends a delivery's span with its outcome.
func endDelivery(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
