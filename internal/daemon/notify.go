package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/metrics"
	"github.com/cronswap/cronswap/internal/notify"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/scheduler"
)

// notifyConfigured reports whether any notification webhook is configured
// (globally or for an action): without one no relay runs, and the notices
// written with the run records stay there until they expire with them
// (notify.max_age keeps a relay started later from sending old ones).
func notifyConfigured(cfg config.Config) bool {
	if len(cfg.Notify.Webhooks) > 0 {
		return true
	}
	for _, d := range cfg.Jobs {
		if d.Notify != nil && len(d.Notify.Webhooks) > 0 {
			return true
		}
	}
	return false
}

// outboxes are the collections whose documents carry notification notices
// written with their events: job_runs (failed, abandoned, missed runs) and
// job_pauses (a job paused after consecutive failures, keyed by the job).
func outboxes(db *mongo.Database) []*mongo.Collection {
	_, runs := record.Collections(db)
	return []*mongo.Collection{runs, record.PausesCollectionOf(db)}
}

// newRelay returns the notification relay of cfg, or nil when no webhook
// is configured; it fails when a webhook names an environment variable
// that is not set. A job's route is its action's (the engine knows which
// action a job runs), else the global one.
func newRelay(cfg config.Config, db *mongo.Database, engine func() *scheduler.Engine, mx *metrics.Metrics, tracer trace.Tracer,
	log *slog.Logger) (*notify.Relay, error) {
	if !notifyConfigured(cfg) {
		return nil, nil
	}
	if err := cfg.CheckNotifyEnv(os.LookupEnv); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return notify.New(notify.Options{
		Notifications: notify.Collection(db),
		Sources:       outboxes(db),
		Instance:      cfg.InstanceID,
		Route: func(jobID string) notify.Route {
			if st, ok := engine().Get(jobID); ok {
				return cfg.NotifyRoute(st.ActionName())
			}
			return cfg.Notify.Route
		},
		Settings:  cfg.Notify,
		Tracer:    tracer,
		Retention: cfg.Runs.Retention,
		Logger:    log,
		Hooks: notify.Hooks{
			Delivered: func(sink string) { mx.CountNotification(sink, true, false) },
			Failed:    func(sink string, gaveUp bool) { mx.CountNotification(sink, false, gaveUp) },
		},
	}), nil
}

// wakeRelay wakes the relay (the store's OnNotice hook); without a relay it
// does nothing.
func (d *Daemon) wakeRelay() {
	if d.relay != nil {
		d.relay.Wake()
	}
}

// runRelay creates the notification indexes and runs the relay until stop
// is called; stop waits for a delivery under way (at most notify.timeout).
// Without a relay it does nothing.
func (d *Daemon) runRelay() (stop func()) {
	if d.relay == nil {
		return func() {}
	}
	db := d.client.Database(d.cfg.Mongo.Database)
	ctx, cancel := context.WithCancel(context.Background())
	go ensureIndexes(ctx, notify.CollectionName, func(ctx context.Context) error {
		return notify.EnsureIndexes(ctx, notify.Collection(db), outboxes(db)...)
	}, d.log)
	done := make(chan struct{})
	go func() { defer close(done); _ = d.relay.Run(ctx) }()
	return func() { cancel(); <-done }
}
