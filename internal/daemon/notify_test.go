package daemon

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/cronswap/cronswap/internal/config"
)

// Without a webhook no relay is built; with one, New refuses to start
// when a webhook names an environment variable that is not set, and
// builds the relay when it is.
func TestRelayFromConfig(t *testing.T) {
	parse := func(text string) config.Config {
		t.Helper()
		cfg, err := config.Parse("mongo: {uri: 'mongodb://127.0.0.1:1/'}\nhttp: {listen: '127.0.0.1:0'}\n" + text)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	log := slog.New(slog.DiscardHandler)
	d, err := New(parse("jobs: {j: {exec: [/bin/sh, -c, 'true']}}"), log)
	if err != nil {
		t.Fatal(err)
	}
	if d.relay != nil {
		t.Error("a relay without any webhook")
	}
	d.Close()

	perAction := "jobs: {j: {exec: [/bin/sh, -c, 'true'], notify: {webhooks: [{name: a, url: 'https://h.example/${CRONSWAP_DAEMON_TEST_TOKEN}'}]}}}"
	_, err = New(parse(perAction), log)
	if err == nil || !strings.Contains(err.Error(), "jobs.j.notify: webhook a: environment variable CRONSWAP_DAEMON_TEST_TOKEN not set") {
		t.Fatalf("New with the variable unset: %v", err)
	}
	t.Setenv("CRONSWAP_DAEMON_TEST_TOKEN", "x")
	d, err = New(parse(perAction), log)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.relay == nil {
		t.Fatal("no relay with an action's webhook")
	}
}
