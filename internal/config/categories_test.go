package config_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cronswap/cronswap/internal/config"
)

// categories: {name: {max_running: n}} loads as given and MaxRunning hands
// the bounds to the admission gate; workers is a plain number, 0 (the
// default) meaning no global bound.
func TestCategoriesAndWorkers(t *testing.T) {
	cfg, err := config.Parse(`
workers: 16
categories:
  billing: {max_running: 5}
  reports:
    max_running: 1
`)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"billing": 5, "reports": 1}; !reflect.DeepEqual(cfg.MaxRunning(), want) {
		t.Errorf("MaxRunning() = %v, want %v", cfg.MaxRunning(), want)
	}
	if cfg.Workers != 16 {
		t.Errorf("workers = %d, want 16", cfg.Workers)
	}
	for _, text := range []string{"", "categories: {}", "workers: 0"} {
		cfg, err := config.Parse(text)
		if err != nil {
			t.Fatalf("Parse(%q): %v", text, err)
		}
		if cfg.MaxRunning() != nil || cfg.Workers != 0 {
			t.Errorf("Parse(%q): MaxRunning() %v, workers %d; want nil and 0 (no bounds)", text, cfg.MaxRunning(), cfg.Workers)
		}
	}
}

// Bad categories and workers are refused, naming the key and the value.
func TestCategoriesRefused(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		want []string
	}{
		{"categories: {billing: {max_running: 0}}", []string{"categories.billing.max_running 0", "at least 1"}},
		{"categories: {billing: {max_running: -3}}", []string{"categories.billing.max_running -3", "at least 1"}},
		{"categories: {billing: {}}", []string{"categories.billing.max_running 0"}},
		{"categories: {billing: }", []string{"categories.billing.max_running 0"}},
		{"categories: {'': {max_running: 2}}", []string{"categories", "name is empty"}},
		{"categories: {'  ': {max_running: 2}}", []string{"categories", "name is empty"}},
		{"categories: {billing: {max_runing: 5}}", []string{"max_runing"}},
		{"categories: {billing: {max_running: 5, queue: 3}}", []string{"queue"}},
		{"categories: {billing: {max_running: lots}}", []string{"lots"}},
		{"categories: {billing: 5}", []string{"config.Category"}},
		{"categories: [billing]", []string{"map[string]config.Category"}},
		{"category: {billing: {max_running: 5}}", []string{"category"}},
		{"workers: -1", []string{"workers -1", "no bound"}},
	} {
		_, err := config.Parse(tt.yaml)
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", tt.yaml)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Parse(%q) error %q does not mention %q", tt.yaml, err, w)
			}
		}
	}
}
