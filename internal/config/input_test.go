package config_test

import (
	"strings"
	"testing"

	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/firepath"
)

// Values that would make every run fail are refused when the configuration
// is loaded, naming the key.
func TestConfigRefusesUnrunnableSettings(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"lock.ttl 1ms", "lock: {ttl: 1ms}", []string{"lock.ttl 1ms", "at least 3s", "ttl/3", "ttl: 1m"}},
		{"lock.ttl just under the minimum", "lock: {ttl: 2999ms}", []string{"lock.ttl 2.999s", "at least 3s"}},
		{"http url not a url", `jobs: {hook: {http: {url: "::not a url"}}}`, []string{"jobs.hook", "http.url", "::not a url", "https://"}},
		{"http url without scheme", `jobs: {hook: {http: {url: "hooks.example.com/x"}}}`, []string{"jobs.hook", "scheme must be http or https"}},
		{"http url without host", `jobs: {hook: {http: {url: "https:///x"}}}`, []string{"jobs.hook", "no host"}},
		{"http method", `jobs: {hook: {http: {url: "https://example.com", method: "SEND"}}}`, []string{"jobs.hook", "http.method", "SEND"}},
	} {
		_, err := config.Parse(c.yaml)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}
	for _, ok := range []string{"lock: {ttl: 3s}", "lock: {ttl: 0s}", "lock: {ttl: 10m}",
		`jobs: {hook: {http: {url: "http://127.0.0.1:8080/hook", method: PUT}}}`} {
		if _, err := config.Parse(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	if firepath.MinLockTTL > 3e9 {
		t.Fatalf("MinLockTTL %s refuses the 3s lease the lock tests run with", firepath.MinLockTTL)
	}
}

// Loading the configuration does not look for the exec programs: the
// commands that only read it (validate, schedules, init, ...) work on a
// machine where the jobs' programs are not installed. The daemon checks
// them at start.
func TestConfigLoadDoesNotNeedThePrograms(t *testing.T) {
	cfg, err := config.Parse("jobs: {report: {exec: [/nonexistent/bin/report, --daily]}}")
	if err != nil {
		t.Fatalf("config with a program not installed here: %v", err)
	}
	if _, err := actions.Start(cfg.Jobs, actions.Host{}); err == nil || !strings.Contains(err.Error(), `job "report"`) {
		t.Fatalf("actions.Start = %v, want the missing program named", err)
	}
}
