package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/tracing/tracingtest"
)

// traceparentOf splits a W3C traceparent into its trace and span ids.
func traceparentOf(t *testing.T, tp string) (traceID, spanID string) {
	t.Helper()
	f := strings.Split(tp, "-")
	if len(f) != 4 || f[0] != "00" || len(f[1]) != 32 || len(f[2]) != 16 {
		t.Fatalf("traceparent %q is not a W3C trace context", tp)
	}
	return f[1], f[2]
}

// headerSink is an HTTP service recording the traceparent of each request.
type headerSink struct {
	*httptest.Server
	mu     sync.Mutex
	parent []string
}

func newHeaderSink(t *testing.T) *headerSink {
	s := &headerSink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.parent = append(s.parent, r.Header.Get("traceparent"))
		s.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *headerSink) first() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.parent) == 0 {
		return "", false
	}
	return s.parent[0], true
}

// firstLine returns the first line of the file at path, if any.
func firstLine(path string) (string, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	line, _, ok := strings.Cut(string(data), "\n")
	return line, ok
}

// tracedJobs is a jobs: section with an exec action writing $TRACEPARENT
// to ledger and an http action posting to url.
func tracedJobs(ledger, url string) string {
	return fmt.Sprintf("\n  ledger:\n    exec: [\"sh\", \"-c\", %q]\n  hook:\n    http:\n      url: %q\n",
		`printf '%s\n' "$TRACEPARENT" >> `+ledger, url)
}

// One fire of an exec action and one of an http action, the daemon
// exporting to an in-test OTLP receiver: each fire is a trace — the fire's
// root span with its admission, claim, run and end write as children —,
// its claim links to the claim batch's span that carried it, the fire
// links to the span of the edit that armed its job (a mongosh insert),
// the action is handed the run span's context (TRACEPARENT in the exec
// program's environment, the traceparent header of the http request),
// and the fire's log lines carry its trace_id.
func TestTracesOfAFire(t *testing.T) {
	uri, db := setup(t)
	rcv, endpoint := tracingtest.HTTP(t)
	sink := newHeaderSink(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), Jobs: tracedJobs(ledger, sink.URL)})
	d := startDaemonEnv(t, binary, cfg, "debug", "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_BSP_SCHEDULE_DELAY=100")
	d.waitReady()
	if l, _ := d.findLog(func(l logLine) bool { return l.str("msg") == "cronswap started" }); l.str("tracing") != "otlp http/protobuf" {
		t.Errorf("start line says tracing %q, want otlp http/protobuf", l.str("tracing"))
	}
	mongosh(t, uri, db.Name(), `db.schedules.insertMany([
		{ _id: "ledger_job", cron_expr: "* * * * * *", job: "ledger", updated_at: new Date() },
		{ _id: "hook_job", cron_expr: "* * * * * *", job: "hook", updated_at: new Date() }])`)
	var execParent, httpParent string
	waitFor(t, 30*time.Second, "a run of each action", func() bool {
		var ok1, ok2 bool
		execParent, ok1 = firstLine(ledger)
		httpParent, ok2 = sink.first()
		return ok1 && ok2
	})
	mongosh(t, uri, db.Name(), `db.schedules.deleteMany({})`)

	for job, parent := range map[string]string{"ledger_job": execParent, "hook_job": httpParent} {
		traceID, runSpanID := traceparentOf(t, parent)
		var trace map[string]tracingtest.Span // by name
		waitFor(t, 30*time.Second, "the spans of "+job+"'s fire", func() bool {
			trace = map[string]tracingtest.Span{}
			for _, s := range rcv.Spans() {
				if s.TraceID == traceID {
					trace[s.Name] = s
				}
			}
			return len(trace) >= 5
		})
		fire := trace["cronswap.fire"]
		if fire.SpanID == "" || fire.ParentSpanID != "" || fire.Attributes["job_id"] != job {
			t.Fatalf("%s: no root fire span of the job in trace %s: %+v", job, traceID, trace)
		}
		for _, name := range []string{"cronswap.admission", "cronswap.claim", "cronswap.run", "cronswap.end"} {
			if s, ok := trace[name]; !ok || s.ParentSpanID != fire.SpanID {
				t.Errorf("%s: span %s %+v, want a child of the fire's span %s", job, name, s, fire.SpanID)
			}
		}
		if run := trace["cronswap.run"]; run.SpanID != runSpanID {
			t.Errorf("%s: the action was handed span %s, want the run's span %s", job, runSpanID, run.SpanID)
		}
		all := map[string]tracingtest.Span{}
		for _, s := range rcv.Spans() {
			all[s.SpanID] = s
		}
		linked := func(s tracingtest.Span, name string) (tracingtest.Span, bool) {
			for _, l := range s.Links {
				if ls, ok := all[l.SpanID]; ok && ls.Name == name && ls.TraceID == l.TraceID {
					return ls, true
				}
			}
			return tracingtest.Span{}, false
		}
		if b, ok := linked(trace["cronswap.claim"], "cronswap.claim_batch"); !ok || b.Attributes["cronswap.claim_batch.size"] == "" {
			t.Errorf("%s: the claim %+v links to no claim batch span", job, trace["cronswap.claim"])
		}
		if e, ok := linked(fire, "cronswap.schedule.apply"); !ok || e.Attributes["job_id"] != job {
			t.Errorf("%s: the fire %+v links to no span of the edit that armed it", job, fire)
		}
		d.waitLog(job+"'s run logged with its trace_id", func(l logLine) bool {
			return l.str("msg") == "run started" && l.str("job_id") == job && l.str("trace_id") == traceID
		})
	}
}

// With tracing turned off (OTEL_TRACES_EXPORTER=none, even with an
// endpoint set) the daemon creates no exporter: its start line says off,
// an action gets no trace context, and the receiver hears nothing, not
// even at shutdown.
func TestTracingOffExportsNothing(t *testing.T) {
	uri, db := setup(t)
	rcv, endpoint := tracingtest.HTTP(t)
	sink := newHeaderSink(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	cfg := writeConfig(t, daemonConfig{URI: uri, Database: db.Name(), Jobs: tracedJobs(ledger, sink.URL)})
	d := startDaemonEnv(t, binary, cfg, "debug", "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_TRACES_EXPORTER=none",
		"OTEL_BSP_SCHEDULE_DELAY=100")
	d.waitReady()
	if l, _ := d.findLog(func(l logLine) bool { return l.str("msg") == "cronswap started" }); l.str("tracing") != "off" {
		t.Errorf("start line says tracing %q, want off", l.str("tracing"))
	}
	insert(t, db, sched("ledger", "* * * * * *"), sched("hook", "* * * * * *"))
	var execParent, httpParent string
	waitFor(t, 30*time.Second, "a run of each action", func() bool {
		var ok1, ok2 bool
		execParent, ok1 = firstLine(ledger)
		httpParent, ok2 = sink.first()
		return ok1 && ok2
	})
	if execParent != "" || httpParent != "" {
		t.Errorf("actions got a trace context with tracing off: exec %q, http %q", execParent, httpParent)
	}
	d.signal(syscall.SIGTERM)
	if err := d.wait(30 * time.Second); err != nil {
		t.Fatalf("daemon exit: %v", err)
	}
	if n := rcv.Requests(); n != 0 {
		t.Errorf("the receiver got %d export requests with tracing off", n)
	}
	if l, ok := d.findLog(func(l logLine) bool { return l.str("trace_id") != "" }); ok {
		t.Errorf("a log line with a trace_id with tracing off: %v", l)
	}
}
