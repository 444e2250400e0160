package metrics

import "github.com/prometheus/client_golang/prometheus"

// Values of the category label of cronswap_fire_lateness_seconds for a
// schedule's category that is not one of Known.Categories.
const (
	// CategoryNone labels the fires of schedules without a category.
	CategoryNone = "none"
	// CategoryOther labels the fires of schedules whose category is not
	// one of Known.Categories: the label stays bounded whatever the
	// schedules' documents say.
	CategoryOther = "other"
)

// Values of the state label of cronswap_watch_state: what
// Sources.WatchState returns.
const (
	// WatchStreaming: the change stream is open and the engine is in step
	// with the collection.
	WatchStreaming = "streaming"
	// WatchPolling: the watcher polls the collection (a server without
	// change streams, or watch.mode: poll) and is in step with it.
	WatchPolling = "polling"
	// WatchLost: neither: before the first full sync, or while the watcher
	// reconnects or reloads after losing its position.
	WatchLost = "lost"
)

// WatchStates lists every value of the state label, each exported from
// the start (1 for the current state, 0 for the others).
var WatchStates = []string{WatchStreaming, WatchPolling, WatchLost}

// Known are the label values a daemon knows before anything happens. Preset
// creates every series they name at 0, so that the first increase of a
// counter is seen by increase() and rate() (a series that appears with its
// first count has no earlier sample to increase from), and fixes the set
// of category label values.
type Known struct {
	// Categories are the schedule categories that keep their own category
	// label (the config's categories); fires of any other category are
	// labelled CategoryOther, fires without one CategoryNone.
	Categories []string
	// MissedReasons are the reasons of missed slots
	// (cronswap_missed_slots_total).
	MissedReasons []string
	// NotRunReasons are the reasons a fire is not run
	// (cronswap_fires_not_run_total).
	NotRunReasons []string
	// SkipReasons are the reasons a fire is recorded skipped
	// (cronswap_fires_skipped_total).
	SkipReasons []string
	// ClaimResults are the results of a claim
	// (cronswap_lock_acquisitions_total).
	ClaimResults []string
	// NotificationSinks are the configured webhooks' names
	// (cronswap_notifications_total, every result).
	NotificationSinks []string
	// FullReloadReasons are reasons of full reloads
	// (cronswap_full_reloads_total) that an alert watches.
	FullReloadReasons []string
}

// Preset creates the series of k, and those of every reload result, at 0
// and fixes the category label values (see Known). Call it once, before the first fire is observed.
func (m *Metrics) Preset(k Known) {
	if m == nil {
		return
	}
	lateness := make(map[string]prometheus.Observer, len(k.Categories)+2)
	for _, c := range append([]string{CategoryNone, CategoryOther}, k.Categories...) {
		lateness[c] = m.FireLateness.WithLabelValues(c)
	}
	m.lateness = lateness
	for _, r := range k.MissedReasons {
		m.MissedSlots.WithLabelValues(r)
	}
	for _, r := range k.NotRunReasons {
		m.FiresNotRun.WithLabelValues(r)
	}
	for _, r := range k.SkipReasons {
		m.SkippedFires.WithLabelValues(r)
	}
	for _, r := range k.ClaimResults {
		m.LockAcquisitions.WithLabelValues(r)
	}
	for _, r := range k.FullReloadReasons {
		m.FullReloads.WithLabelValues(r)
	}
	for _, r := range []string{ReloadApplied, ReloadUnchanged, ReloadRejected, ReloadRemoved} {
		m.Reloads.WithLabelValues(r)
	}
	for _, s := range k.NotificationSinks {
		for _, r := range []string{NotificationDelivered, NotificationFailed, NotificationGivenUp} {
			m.Notifications.WithLabelValues(s, r)
		}
	}
}

// latenessObserver returns the lateness histogram of a schedule's
// category, bounded as Known.Categories says.
func (m *Metrics) latenessObserver(category string) prometheus.Observer {
	if category == "" {
		category = CategoryNone
	}
	if o, ok := m.lateness[category]; ok {
		return o
	}
	if o, ok := m.lateness[CategoryOther]; ok {
		return o
	}
	if category != CategoryNone {
		category = CategoryOther
	}
	return m.FireLateness.WithLabelValues(category) // Preset not called
}
