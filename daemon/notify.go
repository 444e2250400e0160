package daemon

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
)

// outboxes are the collections whose documents carry notification notices
// written with their events: job_runs (failed, abandoned, missed runs) and
// job_pauses (a job paused after consecutive failures, keyed by the job).
// The relay reads and clears them through the store (NoticeSources); these
// handles only get their outbox index.
func outboxes(db *mongo.Database) []*mongo.Collection {
	_, runs := record.Collections(db)
	return []*mongo.Collection{runs, record.PausesCollectionOf(db)}
}

// newRelay returns the notification relay, or nil when no webhook is
// configured: then the notices written with the run records stay there
// until they expire with them (Notifications.MaxAge keeps a relay started
// later from sending old ones). A job's route is its handler's (the engine
// knows which handler a job runs), else the global one.
func (s *Service) newRelay() *notify.Relay {
	if !s.opts.Notify.notifies() {
		return nil
	}
	settings := s.opts.Notify.settings()
	return notify.New(notify.Options{
		Notifications: notify.Collection(s.db),
		Sources:       s.store.NoticeSources(),
		Instance:      s.opts.InstanceID,
		Route: func(jobID string) notify.Route {
			if st, ok := s.engine.Get(jobID); ok {
				return s.opts.Notify.routeFor(st.ActionName())
			}
			return settings.Route
		},
		Settings:  settings,
		Retention: s.opts.Retention,
		Logger:    s.log,
		Tracer:    s.tracer,
		Hooks: notify.Hooks{
			Delivered: func(sink string) { s.metrics.CountNotification(sink, true, false) },
			Failed:    func(sink string, gaveUp bool) { s.metrics.CountNotification(sink, false, gaveUp) },
		},
	})
}

// wakeRelay wakes the relay (the store's OnNotice hook); without a relay it
// does nothing.
func (s *Service) wakeRelay() {
	if s.relay != nil {
		s.relay.Wake()
	}
}

// runRelay creates the notification indexes and runs the relay until stop
// is called; stop waits for a delivery under way (at most
// Notifications.Timeout). Without a relay it does nothing.
func (s *Service) runRelay() (stop func()) {
	if s.relay == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go ensureIndexes(ctx, notify.CollectionName, func(ctx context.Context) error {
		return notify.EnsureIndexes(ctx, notify.Collection(s.db), outboxes(s.db)...)
	}, s.log)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.relay.Run(ctx) }()
	return func() { cancel(); <-done }
}
