package firepath

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/tracing/tracingtest"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

// BenchmarkFireTracing takes one fire at a time through the whole fire path
// (admission, a claim batch in the in-memory store, a handler that returns
// at once, the end written), untraced and traced with every span exported
// over OTLP/HTTP (the SDK's batch processor) to an in-test receiver on
// loopback: the difference per op is tracing's cost per fire. The
// receiver's decoding shares the CPU (and counts in B/op and allocs/op),
// as a collector on the same host would; spans/op says how many spans of
// each fire reached it.
func BenchmarkFireTracing(b *testing.B) {
	for _, traced := range []bool{false, true} {
		name := "tracing=off"
		if traced {
			name = "tracing=on"
		}
		b.Run(name, func(b *testing.B) {
			reg := actions.NewRegistry()
			reg.Register("noop", actions.Action{Handler: jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })})
			opts := RunnerOptions{Registry: reg, InstanceID: "bench", Logger: slog.New(slog.DiscardHandler), Store: newMemStore()}
			var rcv *tracingtest.Receiver
			var tp *sdktrace.TracerProvider
			if traced {
				var endpoint string
				rcv, endpoint = tracingtest.HTTP(b)
				exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint+"/v1/traces"))
				if err != nil {
					b.Fatal(err)
				}
				// A queue that holds every span of the run: each fire's
				// spans are exported, none dropped (the default queue,
				// 2,048 spans, drops them once the exporter falls behind).
				tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(1<<20)))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				opts.Tracer = tp.Tracer("bench")
			}
			r := NewRunner(opts)
			b.Cleanup(func() { r.Shutdown(time.Second) })
			s := schedule.Schedule{ID: "bench", Enabled: true, Job: "noop"}
			base := time.Now().Truncate(time.Millisecond)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				r.Fire(schedule.Due{Schedule: s, Slot: base.Add(time.Duration(i) * time.Millisecond)})
			}
			b.StopTimer()
			if traced {
				if err := tp.ForceFlush(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(rcv.Spans()))/float64(b.N), "spans/op")
			}
		})
	}
}
