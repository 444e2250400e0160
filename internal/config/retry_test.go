package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/jobs"
)

// jobs.<name>.retry and pause_after_failures are read into the action's
// definition, and bad values are refused at load naming the job and key.
func TestRetryAndPauseSettings(t *testing.T) {
	cfg, err := config.Parse("jobs: {r: {exec: [x], retry: {attempts: 4, backoff: 5s, max_backoff: 1m}, pause_after_failures: 3}}")
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Jobs["r"]
	if d.Retry == nil || *d.Retry != (jobs.RetryPolicy{Attempts: 4, Backoff: 5 * time.Second, MaxBackoff: time.Minute}) || d.PauseAfterFailures != 3 {
		t.Fatalf("jobs.r: %+v (retry %+v)", d, d.Retry)
	}
	spec, err := d.Action()
	if err != nil || spec.Retry.Attempts != 4 || spec.PauseAfterFailures != 3 {
		t.Fatalf("spec %+v, %v", spec, err)
	}
	for yaml, want := range map[string][]string{
		"jobs: {r: {exec: [x], retry: {attempts: 101}}}":                             {"jobs.r", "retry.attempts", "101"},
		"jobs: {r: {exec: [x], retry: {attempts: -1}}}":                              {"jobs.r", "retry.attempts"},
		"jobs: {r: {exec: [x], retry: {attempts: 3, backoff: -1s}}}":                 {"jobs.r", "retry.backoff"},
		"jobs: {r: {exec: [x], retry: {attempts: 3, backoff: 1m, max_backoff: 1s}}}": {"jobs.r", "retry.max_backoff"},
		"jobs: {r: {exec: [x], retry: {attempts: 3, max_backoff: 5s}}}":              {"jobs.r", "retry.max_backoff 5s", "default is 30s"},
		"jobs: {r: {exec: [x], retry: {atempts: 3}}}":                                {"atempts"},
		"jobs: {r: {exec: [x], pause_after_failures: -2}}":                           {"jobs.r", "pause_after_failures"},
	} {
		_, err := config.Parse(yaml)
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", yaml)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Parse(%q) error %q does not mention %q", yaml, err, w)
			}
		}
	}
}
