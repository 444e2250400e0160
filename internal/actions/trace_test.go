package actions

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// runSpan returns a context holding a sampled span context with a trace
// state, as the fire path's run span is.
func runSpan(t *testing.T) context.Context {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState("cronswap=1")
	if err != nil {
		t.Fatal(err)
	}
	return trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts}))
}

const wantTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// The run's trace context reaches the action: TRACEPARENT and TRACESTATE
// in an exec program's environment, the traceparent and tracestate
// headers of an http request. Without a span neither is set, and the
// daemon's own TRACEPARENT (a daemon started by a traced process) is not
// inherited. Not parallel: it sets the process environment.
func TestActionsAreToldTheRunsTraceContext(t *testing.T) {
	t.Setenv("TRACEPARENT", "00-11111111111111111111111111111111-2222222222222222-01")
	headers := make(chan http.Header, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { headers <- r.Header.Clone() }))
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "report.json")
	reg, err := Start(map[string]Definition{
		"prog": {Exec: helperArgv(t, out)},
		"hook": {HTTP: &HTTPSettings{URL: srv.URL}},
	}, Host{})
	if err != nil {
		t.Fatal(err)
	}
	prog, _ := reg.Lookup("prog")
	hook, _ := reg.Lookup("hook")
	for _, c := range []struct {
		name        string
		ctx         context.Context
		parent, st  string
		wantPresent bool
	}{
		{"with a span", runSpan(t), wantTraceparent, "cronswap=1", true},
		{"without", context.Background(), "", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := prog.Handler.Handle(c.ctx, testFire()); err != nil {
				t.Fatal(err)
			}
			all := readHelperReport(t, out).All
			for k, want := range map[string]string{"TRACEPARENT": c.parent, "TRACESTATE": c.st} {
				got, ok := all[k]
				if ok != c.wantPresent || (ok && (len(got) != 1 || got[0] != want)) {
					t.Errorf("exec %s = %q (set %v), want %q", k, got, ok, want)
				}
			}
			if err := hook.Handler.Handle(c.ctx, testFire()); err != nil {
				t.Fatal(err)
			}
			h := <-headers
			if got := h.Values("Traceparent"); strings.Join(got, ",") != c.parent {
				t.Errorf("http traceparent %q, want %q", got, c.parent)
			}
			if got := h.Values("Tracestate"); strings.Join(got, ",") != c.st {
				t.Errorf("http tracestate %q, want %q", got, c.st)
			}
		})
	}
}

// A configured header or variable cannot set the trace context: the names
// are the daemon's.
func TestTraceContextNamesAreTheDaemons(t *testing.T) {
	for name, def := range map[string]Definition{
		"header":   {HTTP: &HTTPSettings{URL: "http://127.0.0.1:1/", Headers: map[string]string{"traceparent": "00-x"}}},
		"state":    {HTTP: &HTTPSettings{URL: "http://127.0.0.1:1/", Headers: map[string]string{"TraceState": "a=b"}}},
		"variable": {Exec: []string{"/bin/true"}, ExecSettings: ExecSettings{Env: map[string]string{"TRACEPARENT": "00-x"}}},
	} {
		if _, err := Start(map[string]Definition{"a": def}, Host{}); err == nil {
			t.Errorf("%s: a configured trace context name was accepted", name)
		}
	}
}
