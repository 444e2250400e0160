package jobs

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/config"
)

func TestFromConfig(t *testing.T) {
	t.Parallel()
	argv := []string{"sh", "-c", "echo report for $CRONSWAP_SCHEDULED_AT"}
	cfg := map[string]config.Job{
		"daily_report": {Exec: argv, Timeout: 5 * time.Minute},
		"warm_cache":   {HTTP: &config.HTTPAction{URL: "http://127.0.0.1:8080/hooks/warm", Method: "PUT"}, Overlap: "allow"},
		"ping":         {HTTP: &config.HTTPAction{URL: "http://127.0.0.1:8080/ping"}, Timeout: time.Second, Overlap: "forbid"},
	}
	r, err := FromConfig(cfg)
	if err != nil {
		t.Fatalf("FromConfig: %v", err)
	}
	if got, want := r.Names(), []string{"daily_report", "ping", "warm_cache"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}

	s, ok := r.Lookup("daily_report")
	if !ok {
		t.Fatal("daily_report not registered")
	}
	ea, ok := s.Action.(*ExecAction)
	if !ok {
		t.Fatalf("daily_report action is %T, want *ExecAction", s.Action)
	}
	if !reflect.DeepEqual(ea.Argv, argv) || s.Timeout != 5*time.Minute || s.Overlap != "forbid" {
		t.Errorf("daily_report = argv %q timeout %v overlap %q; want %q 5m forbid (the default)", ea.Argv, s.Timeout, s.Overlap, argv)
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
	ha, ok := s.Action.(*HTTPAction)
	if !ok {
		t.Fatalf("warm_cache action is %T, want *HTTPAction", s.Action)
	}
	if ha.URL != "http://127.0.0.1:8080/hooks/warm" || ha.Method != "PUT" || s.Overlap != "allow" || s.Timeout != 0 {
		t.Errorf("warm_cache = %+v, spec %+v", ha, s)
	}

	s, _ = r.Lookup("ping")
	if ha, ok := s.Action.(*HTTPAction); !ok || ha.Method != "" || s.Timeout != time.Second || s.Overlap != "forbid" {
		t.Errorf("ping = %#v", s)
	}

	if _, ok := r.Lookup("nope"); ok {
		t.Error("Lookup(nope) = true")
	}
}

func TestFromConfigErrors(t *testing.T) {
	t.Parallel()
	if _, err := FromConfig(map[string]config.Job{"empty": {Timeout: time.Second}}); err == nil {
		t.Error("job without exec or http: want an error")
	}
	r, err := FromConfig(nil)
	if err != nil || len(r.Names()) != 0 {
		t.Errorf("FromConfig(nil) = %v, %v; want an empty registry", r.Names(), err)
	}
}

func TestRegistryRegister(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	if n := r.Names(); len(n) != 0 {
		t.Fatalf("new registry has %q", n)
	}
	var calls []string
	mk := func(tag string) Action {
		return ActionFunc(func(ctx context.Context, f Fire) error { calls = append(calls, tag); return nil })
	}
	r.Register("cleanup", Spec{Action: mk("v1"), Timeout: time.Second})
	r.Register("b", Spec{Action: mk("b"), Overlap: "allow"})
	r.Register("a", Spec{Action: mk("a")})

	s, ok := r.Lookup("cleanup")
	if !ok || s.Timeout != time.Second || s.Overlap != "forbid" {
		t.Fatalf("cleanup = %+v, %v; want timeout 1s, overlap forbid", s, ok)
	}
	if s, _ := r.Lookup("b"); s.Overlap != "allow" {
		t.Errorf("b overlap = %q, want allow", s.Overlap)
	}

	// Register replaces, including the policy.
	r.Register("cleanup", Spec{Action: mk("v2"), Timeout: time.Minute, Overlap: "allow"})
	s, _ = r.Lookup("cleanup")
	if s.Timeout != time.Minute || s.Overlap != "allow" {
		t.Errorf("replaced cleanup = %+v", s)
	}
	if err := s.Action.Run(context.Background(), Fire{}); err != nil {
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
	noop := ActionFunc(func(context.Context, Fire) error { return nil })
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				name := fmt.Sprintf("job-%d", j%10)
				r.Register(name, Spec{Action: noop, Timeout: time.Duration(i)})
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
