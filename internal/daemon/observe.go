package daemon

import (
	"maps"
	"slices"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
)

// knownLabels are the label values of cfg's daemon known before anything
// happens (metrics.Known): the configured categories, every reason of a
// missed slot and of a fire not run, the configured webhooks, and the
// reasons of a full reload after a lost stream position.
func knownLabels(cfg config.Config) metrics.Known {
	return metrics.Known{
		Categories:        slices.Sorted(maps.Keys(cfg.Categories)),
		MissedReasons:     record.MissedReasons,
		NotRunReasons:     firepath.NotRunReasons,
		NotificationSinks: notifySinks(cfg),
		// The reloads that say the watcher lost its place in the stream.
		FullReloadReasons: []string{changestream.ReasonLostPosition, changestream.ReasonTokenRefused},
	}
}

// notifySinks returns the names of every webhook of cfg, global or of an
// action, each once.
func notifySinks(cfg config.Config) []string {
	var names []string
	add := func(r notify.Route) {
		for _, w := range r.Webhooks {
			if !slices.Contains(names, w.Name) {
				names = append(names, w.Name)
			}
		}
	}
	add(cfg.Notify.Route)
	for _, d := range cfg.Jobs {
		if d.Notify != nil {
			add(*d.Notify)
		}
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
