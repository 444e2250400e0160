package daemon

import (
	"maps"
	"slices"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/record"
)

// knownLabels are the label values of a service with opts known before
// anything happens (metrics.Known): the bounded categories, every reason
// of a missed slot, of a fire not run and of a skip, every claim result,
// the webhooks, and the reasons of a full reload after a lost stream
// position.
func knownLabels(opts Options) metrics.Known {
	return metrics.Known{
		Categories:        slices.Sorted(maps.Keys(opts.Categories)),
		MissedReasons:     record.MissedReasons,
		NotRunReasons:     firepath.NotRunReasons,
		SkipReasons:       firepath.SkipReasons,
		ClaimResults:      firepath.ClaimedResults(),
		NotificationSinks: notifySinks(opts.Notify),
		// The reloads that say the watcher lost its place in the stream.
		FullReloadReasons: []string{changestream.ReasonLostPosition, changestream.ReasonTokenRefused},
	}
}

// notifySinks returns the names of every webhook of n, global or of a
// handler's route, each once.
func notifySinks(n Notifications) []string {
	var names []string
	add := func(ws []Webhook) {
		for _, w := range ws {
			if !slices.Contains(names, w.Name) {
				names = append(names, w.Name)
			}
		}
	}
	add(n.Webhooks)
	for _, r := range n.Routes {
		add(r.Webhooks)
	}
	slices.Sort(names)
	return names
}

// watchState is the watcher's status as cronswap_watch_state says it:
// streaming or polling while it is in step with the collection, else lost.
func watchState(s changestream.Status) string {
	switch {
	case !s.Ready:
		return metrics.WatchLost
	case s.Mode == changestream.ModePoll:
		return metrics.WatchPolling
	default:
		return metrics.WatchStreaming
	}
}
