package daemon

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/jobs"
	"github.com/cronswap/cronswap/resumetoken"
	"github.com/cronswap/cronswap/schedule"
	"github.com/cronswap/cronswap/triggers"
)

// Idle traffic of the triggers stream: an idle getMore waits this long on
// the server (an insert ends it at once, so a request is seen as fast as
// an edit), and its advancing token is saved this rarely. Together with
// the resync's full read they add about 1.3 commands per idle minute per
// replica (1 getMore, 0.2 token saves, 0.1 reads of the collection).
const (
	triggersMaxAwait         = time.Minute
	triggersIdleSaveInterval = 5 * time.Minute
)

// triggersTokenSuffix is appended to the instance id to name the triggers
// stream's resume token beside the schedules stream's.
const triggersTokenSuffix = "/triggers"

// triggerWatch is the daemon's second change stream: the triggers
// collection, handed to a triggers.Sink that runs each request through the
// daemon's runner.
type triggerWatch struct {
	watcher *changestream.Watcher
	sink    *triggers.Sink
	coll    *mongo.Collection
	log     *slog.Logger
}

// newTriggerWatch builds the watcher of the triggers collection over db,
// running requests through d.runner.
func newTriggerWatch(d *Daemon, db *mongo.Database) *triggerWatch {
	runs := db.Collection(jobs.RunsCollection)
	sink := triggers.NewSink(triggers.Options{
		Runner:    d.runner,
		Store:     triggers.NewStore(triggers.Collection(db), runs, d.cfg.Runs.Retention, d.cfg.InstanceID),
		Schedules: triggers.Schedules(db.Collection(schedule.CollectionName)),
		Location:  d.cfg.Location,
		Logger:    d.log.With("collection", triggers.CollectionName),
	})
	wait := triggersMaxAwait
	if ri := d.cfg.Watch.ResyncInterval; ri != nil && *ri > 0 && *ri < wait {
		wait = *ri
	}
	opts := d.cfg.Watch.Apply(changestream.Options{
		ID:               d.cfg.InstanceID + triggersTokenSuffix,
		Feed:             changestream.NewMongoFeed(triggers.Collection(db), wait),
		Tokens:           resumetoken.NewMongoStore(db.Collection(resumetoken.CollectionName)),
		Sink:             sink,
		Logger:           d.log.With("collection", triggers.CollectionName),
		IdleSaveInterval: triggersIdleSaveInterval,
	})
	return &triggerWatch{watcher: changestream.New(opts), sink: sink, coll: triggers.Collection(db), log: d.log}
}

// start creates the collection's TTL index (in the background, retried)
// and runs the watcher once ready is closed (the schedules are loaded and
// this process holds its instance id). The returned stop ends the watcher
// and waits for the requests being handled; call it after the runner's
// Shutdown.
func (t *triggerWatch) start(ready <-chan struct{}) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	go ensureIndexes(ctx, t.coll.Name(), func(ctx context.Context) error { return triggers.EnsureIndexes(ctx, t.coll) }, t.log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
		if err := t.watcher.Run(ctx); err != nil && ctx.Err() == nil {
			t.log.Warn("triggers watcher stopped", "error", err)
		}
	}()
	return func() {
		cancel()
		<-done
		t.sink.Close()
	}
}
