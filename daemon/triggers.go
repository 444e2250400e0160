package daemon

import (
	"context"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/history"
	"github.com/cronswap/cronswap/internal/triggers"
	"github.com/cronswap/cronswap/resumetoken"
	"github.com/cronswap/cronswap/schedule"
)

// triggersMaxAwait is the getMore wait of the triggers change stream. An
// insert ends a waiting getMore at once (and a shutdown abandons it at
// once), so a request is seen as fast as an edit whatever this is; it only
// sets the idle cost: one getMore every two minutes. The token is kept in
// memory (resumetoken.MemoryStore): a restarted daemon reads the pending
// requests anyway, so a stored token would buy nothing and cost writes.
// With the resync's read of the pending requests (every
// watch.resync_interval, 10 minutes by default) the stream adds about 0.6
// commands per idle minute per replica.
const triggersMaxAwait = 2 * time.Minute

// triggerWatch is the daemon's second change stream: the triggers
// collection, handed to a triggers.Sink that runs each request through the
// daemon's runner.
type triggerWatch struct {
	watcher *changestream.Watcher
	sink    *triggers.Sink
	coll    *mongo.Collection
	log     *slog.Logger
}

// newTriggerWatch builds the watcher of the service's triggers collection,
// running requests through its runner and writing their outcomes with
// store.
func newTriggerWatch(s *Service, store *triggers.Store) *triggerWatch {
	sink := triggers.NewSink(triggers.Options{
		Runner:    s.runner,
		Store:     store,
		Schedules: triggers.Schedules(s.db.Collection(schedule.CollectionName)),
		FirstSeen: history.FirstSeenLookup(s.db.Collection(history.CollectionName)),
		Location:  s.opts.Location,
		Logger:    s.log.With("collection", triggers.CollectionName),
		// The runner's owner: the other replicas put a request aside for
		// the claim grace and drop it once the owner took it.
		Owns:       s.members.Owns,
		ClaimGrace: s.opts.ClaimGrace,
	})
	wait := triggersMaxAwait
	if ri := s.opts.ResyncInterval; ri > 0 && ri < wait {
		wait = ri
	}
	opts := s.opts.watch(changestream.Options{
		ID:     s.opts.InstanceID + "/" + triggers.CollectionName,
		Feed:   triggers.NewFeed(triggers.Collection(s.db), wait),
		Tokens: resumetoken.NewMemoryStore(),
		Sink:   sink,
		Logger: s.log.With("collection", triggers.CollectionName),
	})
	return &triggerWatch{watcher: changestream.New(opts), sink: sink, coll: triggers.Collection(s.db), log: s.log}
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
