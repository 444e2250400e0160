package config

import (
	"strings"
	"testing"
	"time"
)

func TestNotifySection(t *testing.T) {
	cfg, err := Parse(`
notify:
  webhooks:
    - name: ops
      url: https://hooks.example.com/cron
      headers: {Authorization: "Bearer ${CRONSWAP_TEST_HOOK_TOKEN}"}
  on: [failed, paused]
  backoff: 2s
  max_backoff: 1m
jobs:
  quiet:
    exec: [/bin/true]
    notify: {webhooks: []}
  billing:
    exec: [/bin/true]
    notify:
      webhooks: [{name: billing, url: "http://127.0.0.1:9/hook", method: PUT}]
  plain:
    exec: [/bin/true]
`)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Notify.Backoff != 2*time.Second || cfg.Notify.MaxBackoff != time.Minute {
		t.Errorf("timing %+v", cfg.Notify)
	}
	if r := cfg.NotifyRoute("plain"); len(r.Webhooks) != 1 || r.Webhooks[0].Name != "ops" || !r.Sends("failed") || r.Sends("missed") {
		t.Errorf("plain's route %+v, want the global one", r)
	}
	if r := cfg.NotifyRoute("quiet"); r.Sends("failed") {
		t.Errorf("quiet's route %+v sends", r)
	}
	if r := cfg.NotifyRoute("billing"); len(r.Webhooks) != 1 || r.Webhooks[0].Name != "billing" || !r.Sends("missed") {
		t.Errorf("billing's route %+v, want its own (all kinds)", r)
	}
	if r := cfg.NotifyRoute("unknown_action"); len(r.Webhooks) != 1 {
		t.Errorf("an unknown action's route %+v, want the global one", r)
	}
}

func TestNotifySectionRefused(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"notify: {webhooks: [{name: a, url: 'not a url'}]}", "notify: webhooks[0]: webhook a: url"},
		{"notify: {on: [exploded]}", "unknown kind"},
		{"notify: {webhook: []}", "field webhook not found"},
		{"notify: {backoff: 5m, max_backoff: 1m}", "notify: max_backoff 1m0s: must not be shorter than backoff 5m0s"},
		{"jobs: {x: {exec: [/bin/true], notify: {webhooks: [{url: 'https://h/'}]}}}", "jobs.x.notify: webhooks[0]: name is empty"},
	} {
		_, err := Parse(c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want %q", c.text, err, c.want)
		}
	}
}

func TestCheckNotifyEnv(t *testing.T) {
	cfg, err := Parse("jobs: {x: {exec: [/bin/true], notify: {webhooks: [{name: a, url: 'https://h/${CRONSWAP_TEST_UNSET_VAR}'}]}}}")
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.CheckNotifyEnv(func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "jobs.x.notify: webhook a: environment variable CRONSWAP_TEST_UNSET_VAR not set") {
		t.Fatalf("CheckNotifyEnv = %v", err)
	}
}
