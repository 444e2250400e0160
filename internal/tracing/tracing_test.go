package tracing

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/internal/tracing/tracingtest"
)

// setenv sets the variables of m for the test, and clears the other
// variables FromEnv reads.
func setenv(t *testing.T, m map[string]string) {
	for _, k := range []string{EnvSDKDisabled, EnvTracesExporter, EnvEndpoint, EnvTracesEndpoint, EnvProtocol, EnvTracesProtocol, "OTEL_SERVICE_NAME"} {
		t.Setenv(k, m[k])
	}
}

// Off unless configured: no endpoint and no exporter named, or turned off
// explicitly, gives no tracing (and no exporter).
func TestTracingIsOffUnlessConfigured(t *testing.T) {
	for _, m := range []map[string]string{
		{},
		{"OTEL_SERVICE_NAME": "x", EnvProtocol: ProtocolGRPC},
		{EnvEndpoint: "http://127.0.0.1:1", EnvSDKDisabled: "true"},
		{EnvEndpoint: "http://127.0.0.1:1", EnvTracesExporter: "none"},
	} {
		setenv(t, m)
		tr, err := FromEnv(context.Background(), Resource{})
		if err != nil || tr != nil {
			t.Errorf("FromEnv(%v) = %v, %v; want no tracing", m, tr, err)
		}
		if tr.Tracer() != nil {
			t.Errorf("a nil Tracing has a tracer")
		}
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}
	for _, m := range []map[string]string{
		{EnvTracesExporter: "zipkin"},
		{EnvEndpoint: "http://127.0.0.1:1", EnvProtocol: "http/json"},
	} {
		setenv(t, m)
		if _, err := FromEnv(context.Background(), Resource{}); err == nil {
			t.Errorf("FromEnv(%v) accepted an exporter it does not have", m)
		}
	}
}

// Spans reach an OTLP receiver over HTTP and over gRPC, with the
// resource's service name and instance id, parent and link kept.
func TestTracingExportsOverHTTPAndGRPC(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTP, ProtocolGRPC} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			var rcv *tracingtest.Receiver
			var endpoint string
			if protocol == ProtocolGRPC {
				rcv, endpoint = tracingtest.GRPC(t)
			} else {
				rcv, endpoint = tracingtest.HTTP(t)
			}
			setenv(t, map[string]string{EnvEndpoint: endpoint, EnvProtocol: protocol})
			tr, err := FromEnv(context.Background(), Resource{InstanceID: "r1", Version: "test"})
			if err != nil || tr == nil {
				t.Fatalf("FromEnv: %v, %v", tr, err)
			}
			if tr.Protocol() != protocol {
				t.Errorf("protocol %s, want %s", tr.Protocol(), protocol)
			}
			ctx, other := tr.Tracer().Start(context.Background(), "other")
			other.End()
			linked := trace.SpanContextFromContext(ctx)
			ctx, parent := tr.Tracer().Start(context.Background(), "parent")
			_, child := tr.Tracer().Start(ctx, "child", trace.WithLinks(trace.Link{SpanContext: linked}))
			child.End()
			parent.End()
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tr.Shutdown(sctx); err != nil {
				t.Fatal(err)
			}
			byName := map[string]tracingtest.Span{}
			for _, s := range rcv.Spans() {
				byName[s.Name] = s
			}
			p, c := byName["parent"], byName["child"]
			if p.SpanID == "" || c.ParentSpanID != p.SpanID || c.TraceID != p.TraceID {
				t.Fatalf("spans %+v: want child under parent", rcv.Spans())
			}
			if len(c.Links) != 1 || c.Links[0].SpanID != linked.SpanID().String() {
				t.Errorf("child's links %+v, want the span %s", c.Links, linked.SpanID())
			}
			if c.Resource["service.name"] != ServiceName || c.Resource["service.instance.id"] != "r1" {
				t.Errorf("resource %v", c.Resource)
			}
		})
	}
}
