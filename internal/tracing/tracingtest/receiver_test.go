package tracingtest_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/cronswap/cronswap/internal/tracing/tracingtest"
)

// export sends spans named by names to the OTLP/HTTP endpoint url through
// the SDK's exporter, one export per span.
func export(t *testing.T, url string, names ...string) {
	t.Helper()
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(url+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := tp.Tracer("test")
	for _, name := range names {
		_, span := tr.Start(ctx, name)
		span.End()
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReceiverKeepsAndCounts(t *testing.T) {
	rcv, url := tracingtest.HTTP(t)
	export(t, url, "a", "b", "a")
	if got := len(rcv.Spans()); got != 3 {
		t.Errorf("Spans: %d, want 3", got)
	}
	if got := rcv.Counts(); got["a"] != 2 || got["b"] != 1 || len(got) != 2 {
		t.Errorf("Counts: %v, want a:2 b:1", got)
	}
	if got := rcv.Requests(); got != 3 {
		t.Errorf("Requests: %d, want 3 (a syncer exports each span)", got)
	}
}

func TestReceiverCountOnly(t *testing.T) {
	rcv := &tracingtest.Receiver{CountOnly: true}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	export(t, srv.URL, "fire", "fire", "claim")
	if got := rcv.Counts(); got["fire"] != 2 || got["claim"] != 1 || len(got) != 2 {
		t.Errorf("Counts: %v, want fire:2 claim:1", got)
	}
	if got := rcv.Spans(); len(got) != 0 {
		t.Errorf("CountOnly kept %d spans", len(got))
	}
}
