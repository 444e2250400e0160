package actions

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/schedule"
)

func TestFromDefinitions(t *testing.T) {
	t.Parallel()
	argv := []string{"sh", "-c", "echo report for $CRONSWAP_SCHEDULED_AT"}
	defs := map[string]Definition{
		"daily_report": {Exec: argv, Timeout: 5 * time.Minute, Jitter: 3 * time.Second},
		"warm_cache":   {HTTP: &HTTPSettings{URL: "http://127.0.0.1:8080/hooks/warm", Method: "PUT"}, Overlap: jobs.OverlapAllow},
		"ping":         {HTTP: &HTTPSettings{URL: "http://127.0.0.1:8080/ping"}, Timeout: time.Second, Overlap: jobs.OverlapSkip},
	}
	r, err := FromDefinitions(defs)
	if err != nil {
		t.Fatalf("FromDefinitions: %v", err)
	}
	if got, want := r.Names(), []string{"daily_report", "ping", "warm_cache"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}

	s, ok := r.Lookup("daily_report")
	if !ok {
		t.Fatal("daily_report not registered")
	}
	ea, ok := s.Handler.(*ExecAction)
	if !ok {
		t.Fatalf("daily_report action is %T, want *ExecAction", s.Handler)
	}
	if !reflect.DeepEqual(ea.Argv, argv) || s.Timeout != 5*time.Minute || s.Overlap != jobs.OverlapSkip || s.Jitter != 3*time.Second {
		t.Errorf("daily_report = argv %q timeout %v overlap %q jitter %v; want %q 5m forbid (the default) 3s", ea.Argv, s.Timeout, s.Overlap, s.Jitter, argv)
	}
	// The action owns its argv: a later change to the config slice is not seen.
	argv[2] = "rm -rf /"
	if ea.Argv[2] == "rm -rf /" {
		t.Error("ExecAction shares its argv with the config")
	}

	s, ok = r.Lookup("warm_cache")
	if !ok {
		t.Fatal("warm_cache not registered")
	}
	ha, ok := s.Handler.(*HTTPAction)
	if !ok {
		t.Fatalf("warm_cache action is %T, want *HTTPAction", s.Handler)
	}
	if ha.URL != "http://127.0.0.1:8080/hooks/warm" || ha.Method != "PUT" || s.Overlap != jobs.OverlapAllow || s.Timeout != 0 {
		t.Errorf("warm_cache = %+v, spec %+v", ha, s)
	}

	s, _ = r.Lookup("ping")
	if ha, ok := s.Handler.(*HTTPAction); !ok || ha.Method != "" || s.Timeout != time.Second || s.Overlap != jobs.OverlapSkip {
		t.Errorf("ping = %#v", s)
	}

	if _, ok := r.Lookup("nope"); ok {
		t.Error("Lookup(nope) = true")
	}
}

func TestFromDefinitionsErrors(t *testing.T) {
	t.Parallel()
	if _, err := FromDefinitions(map[string]Definition{"empty": {Timeout: time.Second}}); err == nil || !strings.Contains(err.Error(), `job "empty"`) {
		t.Errorf("job without exec or http: err = %v, want an error naming the job", err)
	}
	r, err := FromDefinitions(nil)
	if err != nil || len(r.Names()) != 0 {
		t.Errorf("FromDefinitions(nil) = %v, %v; want an empty registry", r.Names(), err)
	}
}

// Each kind checks its own settings; the policy fields are checked for
// every kind. The errors say what is wrong without the job's name.
func TestDefinitionErrors(t *testing.T) {
	t.Parallel()
	neg := -time.Second
	tests := []struct {
		name string
		def  Definition
		want []string
	}{
		{"neither kind", Definition{Timeout: time.Second}, []string{"no action", "exec (an argv list)", "http (url, method)"}},
		{"both kinds", Definition{Exec: []string{"x"}, HTTP: &HTTPSettings{URL: "http://x"}}, []string{"exec and http"}},
		{"empty argv", Definition{Exec: []string{}}, []string{"exec is empty"}},
		{"empty program", Definition{Exec: []string{"", "x"}}, []string{"exec[0]"}},
		{"empty url", Definition{HTTP: &HTTPSettings{Method: "POST"}}, []string{"http.url"}},
		{"negative timeout", Definition{Exec: []string{"x"}, Timeout: neg}, []string{"timeout", "-1s"}},
		{"negative catchup", Definition{Exec: []string{"x"}, Catchup: &neg}, []string{"catchup", "-1s"}},
		{"negative jitter", Definition{Exec: []string{"x"}, Jitter: neg}, []string{"jitter", "-1s"}},
		{"unknown overlap", Definition{Exec: []string{"x"}, Overlap: "sometimes"}, []string{"overlap", "sometimes", "skip, buffer_one, buffer_all, cancel_other or allow"}},
	}
	for _, tt := range tests {
		err := tt.def.Validate()
		if err == nil {
			t.Errorf("%s: Validate() = nil, want an error", tt.name)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", tt.name, err, w)
			}
		}
	}
	if err := (Definition{Exec: []string{"true"}}).Validate(); err != nil {
		t.Errorf("minimal exec definition: %v", err)
	}
}

// The registry is the engine's policy: Check refuses a schedule naming an
// unknown action the way the engine reports a bad document, Jitter gives the
// action's bound.
func TestRegistryCheckAndJitter(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	noop := jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })
	r.Register("b", Action{Handler: noop, Policy: jobs.Policy{Jitter: 5 * time.Second}})
	r.Register("a", Action{Handler: noop})

	if err := r.Check(schedule.Schedule{ID: "b"}); err != nil {
		t.Errorf("Check(action named by the id) = %v", err)
	}
	if err := r.Check(schedule.Schedule{ID: "x", Job: "a"}); err != nil {
		t.Errorf("Check(action named by job) = %v", err)
	}
	err := r.Check(schedule.Schedule{ID: "x", Job: "nope"})
	var se *schedule.Error
	if !errors.As(err, &se) || se.ID != "x" || se.Field != schedule.FieldJob ||
		se.Reason != `unknown action "nope": not in the config's jobs (known: [a b])` {
		t.Fatalf("Check(unknown action) = %#v, want a *schedule.Error on the job field naming the action and the known ones", err)
	}
	if got := r.Jitter(schedule.Schedule{ID: "b"}); got != 5*time.Second {
		t.Errorf("Jitter(b) = %v, want 5s", got)
	}
	if got := r.Jitter(schedule.Schedule{ID: "x", Job: "a"}); got != 0 {
		t.Errorf("Jitter(a) = %v, want 0", got)
	}
	if got := r.Jitter(schedule.Schedule{ID: "nope"}); got != 0 {
		t.Errorf("Jitter(unknown) = %v, want 0", got)
	}
}

func TestRegistryRegister(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	if n := r.Names(); len(n) != 0 {
		t.Fatalf("new registry has %q", n)
	}
	var calls []string
	mk := func(tag string) jobs.Handler {
		return jobs.HandlerFunc(func(ctx context.Context, f jobs.Run) error { calls = append(calls, tag); return nil })
	}
	r.Register("cleanup", Action{Handler: mk("v1"), Policy: jobs.Policy{Timeout: time.Second}})
	r.Register("b", Action{Handler: mk("b"), Policy: jobs.Policy{Overlap: jobs.OverlapAllow}})
	r.Register("a", Action{Handler: mk("a")})

	s, ok := r.Lookup("cleanup")
	if !ok || s.Timeout != time.Second || s.Overlap != jobs.OverlapSkip {
		t.Fatalf("cleanup = %+v, %v; want timeout 1s, overlap forbid", s, ok)
	}
	if s, _ := r.Lookup("b"); s.Overlap != jobs.OverlapAllow {
		t.Errorf("b overlap = %q, want allow", s.Overlap)
	}

	// Register replaces, including the policy.
	r.Register("cleanup", Action{Handler: mk("v2"), Policy: jobs.Policy{Timeout: time.Minute, Overlap: jobs.OverlapAllow}})
	s, _ = r.Lookup("cleanup")
	if s.Timeout != time.Minute || s.Overlap != jobs.OverlapAllow {
		t.Errorf("replaced cleanup = %+v", s)
	}
	if err := s.Handler.Handle(context.Background(), jobs.Run{}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(calls, []string{"v2"}) {
		t.Errorf("calls = %q, want the replacement [v2]", calls)
	}
	if got, want := r.Names(), []string{"a", "b", "cleanup"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
}

func TestRegistryConcurrent(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	noop := jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil })
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				name := fmt.Sprintf("job-%d", j%10)
				r.Register(name, Action{Handler: noop, Policy: jobs.Policy{Timeout: time.Duration(i)}})
				if _, ok := r.Lookup(name); !ok {
					t.Errorf("Lookup(%s) after Register = false", name)
					return
				}
				_ = r.Names()
			}
		}()
	}
	wg.Wait()
	if n := len(r.Names()); n != 10 {
		t.Errorf("%d names, want 10", n)
	}
}

// The http actions of a registry built from definitions share one client
// that keeps HTTPConnsPerHost connections per host.
func TestFromDefinitionsSharesOneHTTPClient(t *testing.T) {
	reg, err := FromDefinitions(map[string]Definition{
		"a": {HTTP: &HTTPSettings{URL: "http://127.0.0.1:1/a"}},
		"b": {HTTP: &HTTPSettings{URL: "http://127.0.0.1:1/b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sa, _ := reg.Lookup("a")
	sb, _ := reg.Lookup("b")
	ca, cb := sa.Handler.(*HTTPAction).Client, sb.Handler.(*HTTPAction).Client
	if ca == nil || ca != cb {
		t.Fatalf("clients %p and %p: want one shared client", ca, cb)
	}
	tr, ok := ca.Transport.(*http.Transport)
	if !ok || tr.MaxConnsPerHost != HTTPConnsPerHost || tr.MaxIdleConnsPerHost != HTTPConnsPerHost {
		t.Fatalf("transport %+v: want %d connections per host kept", ca.Transport, HTTPConnsPerHost)
	}
}
