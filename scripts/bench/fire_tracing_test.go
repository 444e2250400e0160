package main

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestTracingFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    []string
		wantErr bool
	}{
		{args: nil, want: nil},
		{args: []string{"-tracing", "off,on"}, want: []string{"off", "on"}},
		{args: []string{"-tracing", " on , off,on,"}, want: []string{"on", "off", "on"}},
		{args: []string{"-tracing", "on,maybe"}, wantErr: true},
		{args: []string{"-tracing", ","}, wantErr: true},
		{args: []string{"-tracing-env", "OTEL_BSP_MAX_QUEUE_SIZE=100000 OTEL_BSP_SCHEDULE_DELAY=1000"}},
		{args: []string{"-tracing-env", "GOGC=off"}, wantErr: true},
		{args: []string{"-tracing-env", "OTEL_BSP_MAX_QUEUE_SIZE"}, wantErr: true},
	} {
		var (
			o fireSettings
			a fireArgs
		)
		fs := fireFlagSet(&o, &a)
		fs.SetOutput(&strings.Builder{})
		err := fs.Parse(tc.args)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: error %v, want error %t", tc.args, err, tc.wantErr)
			continue
		}
		if err == nil && !slices.Equal(o.tracing, tc.want) {
			t.Errorf("%q: tracing %q, want %q", tc.args, o.tracing, tc.want)
		}
	}
	o := fireSettings{bursts: 1, batch: 1, timeout: time.Minute, every: 30 * time.Second, sustained: true, tracing: []string{"on"}}
	if err := o.validate(); err == nil {
		t.Error("validate accepted -tracing with -sustained")
	}
}

func TestDaemonEnv(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://elsewhere:4318")
	t.Setenv("OTEL_SERVICE_NAME", "not-the-bench")
	t.Setenv("BENCH_TEST_KEPT", "yes")
	if env := daemonEnv("", "http://127.0.0.1:1", nil); env != nil {
		t.Errorf("no setting: %d variables, want nil (the bench's environment as it is)", len(env))
	}
	otel := func(env []string) []string {
		var out []string
		for _, kv := range env {
			if strings.HasPrefix(kv, "OTEL_") {
				out = append(out, kv)
			}
		}
		return out
	}
	off := daemonEnv(tracingOff, "http://127.0.0.1:1", []string{"OTEL_BSP_MAX_QUEUE_SIZE=9"})
	if got := otel(off); len(got) != 0 {
		t.Errorf("off: OTEL_* variables %q, want none", got)
	}
	if !slices.Contains(off, "BENCH_TEST_KEPT=yes") {
		t.Error("off: dropped a variable other than OTEL_*")
	}
	on := daemonEnv(tracingOn, "http://127.0.0.1:1", []string{"OTEL_BSP_MAX_QUEUE_SIZE=9"})
	want := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_BSP_MAX_QUEUE_SIZE=9"}
	if got := otel(on); !slices.Equal(got, want) {
		t.Errorf("on: OTEL_* variables %q, want %q", got, want)
	}
}

// TestSpanReceiverCountsExports exports spans with the SDK's OTLP/HTTP
// exporter, as the daemon does, to the bench's receiver.
func TestSpanReceiverCountsExports(t *testing.T) {
	r, err := startSpanReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	before := r.counts()
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(r.url+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	tr := tp.Tracer("bench-test")
	for _, name := range []string{"cronswap.fire", "cronswap.run", "cronswap.fire"} {
		_, span := tr.Start(ctx, name)
		span.End()
	}
	if err := tp.Shutdown(ctx); err != nil { // exports what the batcher holds
		t.Fatal(err)
	}
	got := countsDelta(r.counts(), before)
	if want := map[string]int{"cronswap.fire": 2, "cronswap.run": 1}; !maps.Equal(got, want) {
		t.Errorf("spans received %v, want %v", got, want)
	}
	var none *spanReceiver
	if c := none.counts(); c != nil {
		t.Errorf("a nil receiver (tracing off) counts %v", c)
	}
}

func TestCountsDeltaAndPerFire(t *testing.T) {
	d := countsDelta(map[string]int{"a": 5, "b": 2, "c": 1}, map[string]int{"a": 2, "b": 2})
	if want := map[string]int{"a": 3, "c": 1}; !maps.Equal(d, want) {
		t.Errorf("countsDelta %v, want %v", d, want)
	}
	bu := fireBurst{windowFires: 200, daemonCPU: 120 * time.Millisecond, spans: map[string]int{"cronswap.fire": 200, "cronswap.run": 200, "cronswap.claim_batch": 5}}
	if got := bu.cpuPerFire(); got != 600 {
		t.Errorf("cpuPerFire %v µs, want 600", got)
	}
	if got := bu.spansPerFire(); got != 2.025 {
		t.Errorf("spansPerFire %v, want 2.025", got)
	}
	if got := (fireBurst{}).cpuPerFire() + (fireBurst{}).spansPerFire(); got != 0 {
		t.Errorf("no fires: %v, want 0", got)
	}
}
