// Package tracingtest is an OTLP trace receiver for tests and benchmarks:
// it accepts the spans an OTLP exporter sends over HTTP (protobuf) or gRPC
// on loopback and keeps them for the test to inspect, or only counts them
// (Receiver.CountOnly, the fire benchmark's receiver).
package tracingtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, its ids as hex.
type Span struct {
	Name         string
	TraceID      string
	SpanID       string
	ParentSpanID string
	// Links are the span contexts the span links to.
	Links []Link
	// Attributes are the span's attributes, as strings.
	Attributes map[string]string
	// Resource are its resource's attributes, as strings.
	Resource map[string]string
}

// Link is one link of a span.
type Link struct {
	TraceID string
	SpanID  string
}

// Receiver keeps the spans exported to it. Its zero value is ready to
// use; it is also the OTLP/HTTP handler (ServeHTTP), for a program that
// runs its own server.
type Receiver struct {
	// CountOnly makes the receiver count the spans by name (Counts) and
	// keep none (Spans is empty): a benchmark's receiver, whose memory
	// does not grow with the spans. Set it before the first export.
	CountOnly bool

	mu    sync.Mutex
	spans []Span
	// counts are the spans received per name.
	counts map[string]int
	// requests counts the export requests received.
	requests int
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Counts returns the number of spans received per span name.
func (r *Receiver) Counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.counts))
	for name, n := range r.counts {
		out[name] = n
	}
	return out
}

// Requests returns the number of export requests received.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

func (r *Receiver) add(req *coltrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	for _, rs := range req.GetResourceSpans() {
		var res map[string]string
		if !r.CountOnly {
			res = attrs(rs.GetResource().GetAttributes())
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.counts[s.GetName()]++
				if r.CountOnly {
					continue
				}
				sp := Span{Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Attributes: attrs(s.GetAttributes()), Resource: res}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
				}
				r.spans = append(r.spans, sp)
			}
		}
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			out[kv.GetKey()] = v.GetStringValue()
		default:
			out[kv.GetKey()] = v.String()
		}
	}
	return out
}

// HTTP starts a receiver of OTLP over HTTP (protobuf, optionally gzip) on
// loopback; its endpoint (http://127.0.0.1:PORT) is the value of
// OTEL_EXPORTER_OTLP_ENDPOINT. It stops when the test ends.
func HTTP(t testing.TB) (*Receiver, string) {
	r := &Receiver{}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL
}

// ServeHTTP is the OTLP/HTTP trace endpoint: POST /v1/traces, an
// ExportTraceServiceRequest in protobuf, optionally gzip-encoded.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
		http.NotFound(w, req)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = io.Copy(w, bytes.NewReader(out))
}

// GRPC starts a receiver of OTLP over gRPC (plaintext) on loopback; its
// endpoint (http://127.0.0.1:PORT) is the value of
// OTEL_EXPORTER_OTLP_ENDPOINT with OTEL_EXPORTER_OTLP_PROTOCOL=grpc. It
// stops when the test ends.
func GRPC(t testing.TB) (*Receiver, string) {
	r := &Receiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, grpcService{r: r})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return r, "http://" + ln.Addr().String()
}

type grpcService struct {
	coltrace.UnimplementedTraceServiceServer
	r *Receiver
}

func (s grpcService) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &coltrace.ExportTraceServiceResponse{}, nil
}
