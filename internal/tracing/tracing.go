// Package tracing sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables (OTLP over HTTP or gRPC, the official Go SDK): the
// cronswap binary's tracer provider. The daemon's parts see only the
// OpenTelemetry API (package tracecontext), so a Go program embedding
// cronswap brings its own provider and none of the SDK.
//
// Tracing is off unless configured: FromEnv returns a nil *Tracing, and
// every part of the daemon given a nil provider creates no span at all,
// so the fire path pays nothing for it.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/internal/tracecontext"
)

// The environment variables FromEnv reads itself; the exporter reads the
// other OTEL_EXPORTER_OTLP_* variables (endpoint, headers, timeout, TLS,
// compression), the SDK OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_*, the
// resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
const (
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// The OTLP protocols FromEnv supports.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// ServiceName is the service.name of the spans unless OTEL_SERVICE_NAME
// or OTEL_RESOURCE_ATTRIBUTES say otherwise.
const ServiceName = "cronswap"

// Tracing is a configured tracer provider exporting over OTLP. A nil
// *Tracing is tracing off.
type Tracing struct {
	provider *sdktrace.TracerProvider
	protocol string
}

// Resource describes this process in every span it exports.
type Resource struct {
	// InstanceID is service.instance.id (the daemon's instance_id).
	InstanceID string
	// Version is service.version.
	Version string
}

// Enabled reports whether the environment configures tracing: an
// OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER is otlp, and
// neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none turns it
// off.
func Enabled() bool {
	if strings.EqualFold(get(EnvSDKDisabled), "true") {
		return false
	}
	switch exp := get(EnvTracesExporter); {
	case strings.EqualFold(exp, "none"):
		return false
	case exp != "":
		return true // otlp, or a value FromEnv refuses
	}
	return get(EnvEndpoint) != "" || get(EnvTracesEndpoint) != ""
}

// FromEnv returns the tracing the environment configures, or nil when it
// configures none (Enabled). It fails on an exporter or protocol it does
// not support and on an exporter the OTLP package refuses; it does not
// wait for the collector.
func FromEnv(ctx context.Context, r Resource) (*Tracing, error) {
	if !Enabled() {
		return nil, nil
	}
	if exp := get(EnvTracesExporter); exp != "" && !strings.EqualFold(exp, "otlp") {
		return nil, fmt.Errorf("%s=%s: only otlp (or none) is supported", EnvTracesExporter, exp)
	}
	protocol := get(EnvTracesProtocol)
	if protocol == "" {
		protocol = get(EnvProtocol)
	}
	if protocol == "" {
		protocol = ProtocolHTTP
	}
	var exporter sdktrace.SpanExporter
	var err error
	switch protocol {
	case ProtocolHTTP:
		exporter, err = otlptracehttp.New(ctx)
	case ProtocolGRPC:
		exporter, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%s=%s: supported are %s and %s", EnvProtocol, protocol, ProtocolHTTP, ProtocolGRPC)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP %s trace exporter: %w", protocol, err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", ServiceName)}
	if r.InstanceID != "" {
		attrs = append(attrs, attribute.String("service.instance.id", r.InstanceID))
	}
	if r.Version != "" {
		attrs = append(attrs, attribute.String("service.version", r.Version))
	}
	// The environment's attributes come last: they win.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exporter.Shutdown(ctx)
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return &Tracing{
		provider: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)),
		protocol: protocol,
	}, nil
}

// Protocol is the OTLP protocol spans are exported with.
func (t *Tracing) Protocol() string { return t.protocol }

// Provider returns the tracer provider; nil when t is nil (tracing off).
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// Tracer returns the daemon's tracer; nil when t is nil (tracing off).
func (t *Tracing) Tracer() trace.Tracer { return tracecontext.TracerOf(t.Provider()) }

// Shutdown exports the spans still buffered and stops the exporter,
// within ctx. Nil does nothing.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("trace exporter shutdown: %w", err)
	}
	return nil
}

// get returns the environment variable k, trimmed.
func get(k string) string { return strings.TrimSpace(os.Getenv(k)) }
