package daemon

import (
	"slices"
	"testing"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/notify"
)

// The watcher's status as cronswap_watch_state reports it: lost whenever
// it is not ready, whatever its mode.
func TestWatchState(t *testing.T) {
	for _, c := range []struct {
		s    changestream.Status
		want string
	}{
		{changestream.Status{Mode: changestream.ModeChangeStream, Ready: true}, metrics.WatchStreaming},
		{changestream.Status{Mode: changestream.ModePoll, Ready: true}, metrics.WatchPolling},
		{changestream.Status{Mode: changestream.ModeChangeStream}, metrics.WatchLost},
		{changestream.Status{Mode: changestream.ModePoll}, metrics.WatchLost},
		{changestream.Status{Mode: changestream.ModeAuto}, metrics.WatchLost},
	} {
		if got := watchState(c.s); got != c.want {
			t.Errorf("watchState(%+v) = %s, want %s", c.s, got, c.want)
		}
	}
}

// The label values known from the config: its categories, and each
// webhook once whether global or an action's.
func TestKnownLabelsFromConfig(t *testing.T) {
	var cfg config.Config
	cfg.Categories = map[string]config.Category{"reports": {MaxRunning: 2}, "billing": {MaxRunning: 5}}
	cfg.Notify.Webhooks = []notify.Webhook{{Name: "ops"}}
	cfg.Jobs = map[string]actions.Definition{
		"a": {Notify: &notify.Route{Webhooks: []notify.Webhook{{Name: "billing-hook"}, {Name: "ops"}}}},
		"b": {},
	}
	k := knownLabels(cfg)
	if !slices.Equal(k.Categories, []string{"billing", "reports"}) {
		t.Errorf("categories %v", k.Categories)
	}
	if !slices.Equal(k.NotificationSinks, []string{"billing-hook", "ops"}) {
		t.Errorf("sinks %v", k.NotificationSinks)
	}
	if len(k.MissedReasons) == 0 || len(k.NotRunReasons) == 0 {
		t.Errorf("reasons missing: %+v", k)
	}
}
