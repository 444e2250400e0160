package firepath

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// A traced fire is one trace: its root span, linked to the change that
// armed the job, with its admission, claim (linked to the claim batch's
// own span), run and end write as children; the action's ctx holds the
// run's span; the end it writes carries the fire's trace context (for the
// notice it causes). Without a tracer no span is made and the end carries
// none.
func TestFireTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	_, edit := tp.Tracer("test").Start(context.Background(), "cronswap.schedule.apply")
	edit.End()
	var handed trace.SpanContext
	reg := actions.NewRegistry()
	reg.Register("fails", actions.Action{Handler: jobs.HandlerFunc(func(ctx context.Context, _ jobs.Run) error {
		handed = trace.SpanContextFromContext(ctx)
		return errors.New("boom")
	})})
	var mu sync.Mutex
	var ends []record.RunEnd
	store := newMemStore()
	store.beforeEnd = func(es []record.LeaseEnd) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range es {
			ends = append(ends, e.End)
		}
	}
	s := schedule.Schedule{ID: "billing", Enabled: true, Job: "fails", Category: "money"}
	for _, traced := range []bool{true, false} {
		opts := RunnerOptions{Registry: reg, InstanceID: "a", Logger: slog.New(slog.DiscardHandler), Store: store, TTL: time.Minute,
			ArmedBy: func(id string) (trace.SpanContext, bool) { return edit.SpanContext(), id == "billing" }}
		if traced {
			opts.Tracer = tp.Tracer("test")
		}
		r := NewRunner(opts)
		handed = trace.SpanContext{}
		slot := time.Now().Truncate(time.Second)
		if !traced {
			slot = slot.Add(time.Second)
		}
		r.Fire(schedule.Due{Schedule: s, Slot: slot})
		r.Shutdown(5 * time.Second)
		if !traced {
			if handed.IsValid() || len(exp.GetSpans()) != 7 {
				t.Errorf("untraced: the action got %v, %d spans (want the 7 of the traced fire only)", handed, len(exp.GetSpans()))
			}
			if e := ends[len(ends)-1]; e.TraceParent != "" {
				t.Errorf("untraced fire's end carries %q", e.TraceParent)
			}
			continue
		}
		byName := map[string]sdktrace.ReadOnlySpan{}
		for _, sp := range exp.GetSpans().Snapshots() {
			byName[sp.Name()] = sp
		}
		fire := byName[SpanFire]
		if fire == nil || fire.Parent().IsValid() || len(fire.Links()) != 1 || fire.Links()[0].SpanContext.SpanID() != edit.SpanContext().SpanID() {
			t.Fatalf("fire span %v: want a root linked to the edit's span", fire)
		}
		for _, name := range []string{SpanAdmission, SpanClaim, SpanRun, SpanEnd} {
			if sp := byName[name]; sp == nil || sp.Parent().SpanID() != fire.SpanContext().SpanID() {
				t.Errorf("%s: %v, want a child of the fire", name, sp)
			}
		}
		batch, claim := byName[SpanClaimBatch], byName[SpanClaim]
		if batch == nil || batch.Parent().IsValid() || len(claim.Links()) != 1 || claim.Links()[0].SpanContext.SpanID() != batch.SpanContext().SpanID() {
			t.Errorf("claim %v links %v, want the batch's span %v", claim, claim.Links(), batch)
		}
		if run := byName[SpanRun]; handed.SpanID() != run.SpanContext().SpanID() {
			t.Errorf("the action's ctx holds span %s, want the run's %s", handed.SpanID(), run.SpanContext().SpanID())
		}
		mu.Lock()
		tp := ends[len(ends)-1].TraceParent
		mu.Unlock()
		if !strings.Contains(tp, fire.SpanContext().TraceID().String()+"-"+fire.SpanContext().SpanID().String()) {
			t.Errorf("the failed end carries %q, want the fire span's context", tp)
		}
	}
}
