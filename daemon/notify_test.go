package daemon

import (
	"strings"
	"testing"

	"github.com/cronswap/cronswap/internal/testmongo"
)

// Without a webhook no relay is built; with one, New refuses options whose
// webhook names an environment variable that is not set, and builds the
// relay when it is set.
func TestRelayFromOptions(t *testing.T) {
	db := testmongo.Client(t).Database("relay_test")
	opts := Options{InstanceID: "relay-test"}
	s, err := New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if s.relay != nil {
		t.Error("a relay without any webhook")
	}

	opts.Notify.Routes = map[string]NotifyRoute{"j": {Webhooks: []Webhook{{Name: "a", URL: "https://h.example/${CRONSWAP_DAEMON_TEST_TOKEN}"}}}}
	_, err = New(db, opts)
	if err == nil || !strings.Contains(err.Error(), `Notify.Routes["j"]: webhook a: environment variable CRONSWAP_DAEMON_TEST_TOKEN not set`) {
		t.Fatalf("New with the variable unset: %v", err)
	}
	t.Setenv("CRONSWAP_DAEMON_TEST_TOKEN", "x")
	if s, err = New(db, opts); err != nil {
		t.Fatal(err)
	}
	if s.relay == nil {
		t.Fatal("no relay with a handler's webhook")
	}
}
