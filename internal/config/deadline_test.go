package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/config"
)

// starting_deadline (top level and per action) and queue_limit load as
// given; 0 leaves the fire path's defaults; negative values are refused
// naming the key.
func TestStartingDeadlineAndQueueLimit(t *testing.T) {
	cfg, err := config.Parse(`
starting_deadline: 30s
queue_limit: 500
jobs:
  billing:
    exec: ["true"]
    starting_deadline: 10m
  tick:
    exec: ["true"]
`)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StartingDeadline != 30*time.Second || cfg.QueueLimit != 500 ||
		cfg.Jobs["billing"].StartingDeadline != 10*time.Minute || cfg.Jobs["tick"].StartingDeadline != 0 {
		t.Fatalf("loaded starting_deadline %s, queue_limit %d, jobs %+v", cfg.StartingDeadline, cfg.QueueLimit, cfg.Jobs)
	}
	if cfg, err := config.Parse(`jobs: {tick: {exec: ["true"]}}`); err != nil || cfg.StartingDeadline != 0 || cfg.QueueLimit != 0 {
		t.Fatalf("defaults: %v, starting_deadline %s, queue_limit %d; want 0 (the fire path's defaults)", err, cfg.StartingDeadline, cfg.QueueLimit)
	}
	for text, want := range map[string]string{
		"starting_deadline: -1s": "starting_deadline -1s",
		"queue_limit: -1":        "queue_limit -1",
		"jobs: {tick: {exec: [\"true\"], starting_deadline: -5s}}": "jobs.tick: starting_deadline -5s",
	} {
		if _, err := config.Parse(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming %q", text, err, want)
		}
	}
}
