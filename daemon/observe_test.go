package daemon

import (
	"slices"
	"testing"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/metrics"
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

// The label values known from the options: the bounded categories, and
// each webhook once whether global or a handler's.
func TestKnownLabelsFromOptions(t *testing.T) {
	opts := Options{Categories: map[string]int{"reports": 2, "billing": 5},
		Notify: Notifications{Webhooks: []Webhook{{Name: "ops"}},
			Routes: map[string]NotifyRoute{"a": {Webhooks: []Webhook{{Name: "billing-hook"}, {Name: "ops"}}}, "b": {}}}}
	k := knownLabels(opts)
	if !slices.Equal(k.Categories, []string{"billing", "reports"}) {
		t.Errorf("categories %v", k.Categories)
	}
	if !slices.Equal(k.NotificationSinks, []string{"billing-hook", "ops"}) {
		t.Errorf("sinks %v", k.NotificationSinks)
	}
	if len(k.MissedReasons) == 0 || len(k.NotRunReasons) == 0 || len(k.FullReloadReasons) != 2 {
		t.Errorf("reasons missing: %+v", k)
	}
}
