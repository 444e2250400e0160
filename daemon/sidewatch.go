package daemon

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/resumetoken"
)

// sideMaxAwait is the getMore wait of the change streams of the small
// collections the fire path consults (blackouts, calendars). An event ends
// a waiting getMore at once, so a change takes effect as soon as it is
// written whatever this is; it only sets the idle cost: one getMore a
// minute each (the schedules stream, at changestream.DefaultMaxAwait,
// sends six).
const sideMaxAwait = time.Minute

// sideWatch keeps a sink equal to one small collection the fire path
// consults, through a change-stream watcher of its own (its resume token in
// memory: see resumetoken.MemoryStore; a restart reads the collection
// again), and tells whether the collection has been read once. The
// blackouts and the calendars each have one.
type sideWatch struct {
	watcher *changestream.Watcher
	// synced is closed after the first full read of the collection: the
	// engine does not fire before it, so no fire runs against rules it did
	// not know of yet.
	synced     chan struct{}
	syncedOnce sync.Once
}

// newSideWatch returns the watch that feeds sink from db's collection;
// it reads nothing until start.
func newSideWatch(db *mongo.Database, collection string, sink changestream.Sink, opts Options, log *slog.Logger) *sideWatch {
	w := &sideWatch{synced: make(chan struct{})}
	w.watcher = changestream.New(opts.watch(changestream.Options{
		ID:     opts.InstanceID + "/" + collection,
		Feed:   changestream.NewMongoFeed(db.Collection(collection), sideMaxAwait),
		Tokens: resumetoken.NewMemoryStore(),
		Sink:   sink,
		Logger: log.With("collection", collection),
		Hooks: changestream.Hooks{
			Synced: func() { w.syncedOnce.Do(func() { close(w.synced) }) },
		},
	}))
	return w
}

// ready reports whether the collection has been read once.
func (w *sideWatch) ready() bool { return closed(w.synced) }

// closed reports, without waiting, whether ch has been closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// start runs the watcher from when this process joined the members (or
// found the database unreachable, like the schedules watcher) until ctx
// ends; the returned channel is closed when it has stopped.
func (w *sideWatch) start(ctx context.Context, joined, away <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-joined:
		case <-away:
		case <-ctx.Done():
			return
		}
		_ = w.watcher.Run(ctx) // errors only for an unknown mode, which config refuses
	}()
	return done
}
