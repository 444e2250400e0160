package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cronswap/cronswap/daemon"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/jobs"
)

var quiet = slog.New(slog.DiscardHandler)

func noop(context.Context, jobs.Run) error { return nil }

// New refuses options the parts cannot run with, naming the field.
func TestNewRefusesBadOptions(t *testing.T) {
	db := testmongo.Client(t).Database("options_test")
	for _, c := range []struct {
		opts daemon.Options
		want string
	}{
		{daemon.Options{}, "InstanceID is empty"},
		{daemon.Options{InstanceID: "a", WatchMode: "sometimes"}, "WatchMode"},
		{daemon.Options{InstanceID: "a", LockTTL: time.Second}, "LockTTL 1s"},
		{daemon.Options{InstanceID: "a", Categories: map[string]int{"billing": 0}}, `Categories["billing"] 0`},
		{daemon.Options{InstanceID: "a", Workers: -1}, "Workers -1"},
		{daemon.Options{InstanceID: "a", Retention: -time.Hour}, "Retention -1h0m0s"},
		{daemon.Options{InstanceID: "a", Notify: daemon.Notifications{Webhooks: []daemon.Webhook{{Name: "ops", URL: "ftp://x"}}}}, "Notify: webhooks[0]: webhook ops"},
	} {
		if _, err := daemon.New(db, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", c.opts, err, c.want)
		}
	}
	if _, err := daemon.New(nil, daemon.Options{InstanceID: "a"}); err == nil {
		t.Error("New accepted a nil database")
	}
}

// Handle refuses an empty name, a nil handler, a bad policy (in the config
// file's words), and any call once Run has started; Run runs once.
func TestHandleAndRunRefusals(t *testing.T) {
	db := testmongo.NewDatabase(t, testmongo.Client(t))
	s, err := daemon.New(db, daemon.Options{InstanceID: "handle-test", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		h    jobs.Handler
		p    jobs.Policy
		want string
	}{
		{"", jobs.HandlerFunc(noop), jobs.Policy{}, "the name is empty"},
		{"a", nil, jobs.Policy{}, "the handler is nil"},
		{"a", jobs.HandlerFunc(noop), jobs.Policy{Overlap: "sometimes"}, `overlap "sometimes"`},
		{"a", jobs.HandlerFunc(noop), jobs.Policy{Timeout: -time.Second}, "timeout -1s"},
		{"a", jobs.HandlerFunc(noop), jobs.Policy{Retry: jobs.RetryPolicy{Attempts: -1}}, "retry.attempts -1"},
	} {
		if err := s.Handle(c.name, c.h, c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Handle(%q, %v, %+v) = %v, want an error saying %q", c.name, c.h, c.p, err, c.want)
		}
	}
	if err := s.Handle("a", jobs.HandlerFunc(noop), jobs.Policy{Overlap: "forbid"}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	srv := httptest.NewServer(s.HTTPHandler())
	defer srv.Close()
	waitReady(t, srv.URL)
	if err := s.Handle("b", jobs.HandlerFunc(noop), jobs.Policy{}); err == nil || !strings.Contains(err.Error(), "after Run") {
		t.Errorf("Handle after Run = %v, want a refusal", err)
	}
	if err := s.Run(context.Background()); err == nil {
		t.Error("a second Run was accepted")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("not ready within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// /metrics serves the service's own registry by default, the program's
// registry when it is a Gatherer too, and nothing when it is only a
// Registerer (the program serves it).
func TestMetricsOnTheProgramsRegisterer(t *testing.T) {
	db := testmongo.Client(t).Database("metrics_test")
	get := func(o daemon.Options) (int, string) {
		t.Helper()
		o.InstanceID, o.Logger = "metrics-test", quiet
		s, err := daemon.New(db, o)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		s.HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return rec.Code, string(body)
	}
	if code, body := get(daemon.Options{}); code != http.StatusOK || !strings.Contains(body, "cronswap_schedules_armed") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("own registry: %d, want cronswap and runtime metrics:\n%.300s", code, body)
	}
	reg := prometheus.NewRegistry()
	if code, body := get(daemon.Options{Registerer: reg}); code != http.StatusOK || !strings.Contains(body, "cronswap_schedules_armed") || strings.Contains(body, "go_goroutines") {
		t.Errorf("the program's registry: %d, want its cronswap metrics only:\n%.300s", code, body)
	}
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"service": "b"}, prometheus.NewRegistry())
	if code, _ := get(daemon.Options{Registerer: wrapped}); code != http.StatusNotFound {
		t.Errorf("a Registerer that is no Gatherer: /metrics answered %d, want 404", code)
	}
}
