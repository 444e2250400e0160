package daemon

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/blackout"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/resumetoken"
)

// blackoutsMaxAwait is the getMore wait of the blackouts change stream. An
// event ends a waiting getMore at once, so a window takes effect as soon as
// it is written whatever this is; it only sets the idle cost: one getMore a
// minute (the schedules stream, at changestream.DefaultMaxAwait, sends six).
const blackoutsMaxAwait = time.Minute

// blackoutWatch keeps the daemon's blackout windows equal to the
// blackouts collection, through a change-stream watcher of its own (its
// resume token in memory: see resumetoken.MemoryStore), and answers the fire
// path's question whether a fire falls in a window.
type blackoutWatch struct {
	set     *blackout.Set
	watcher *changestream.Watcher
	// synced is closed after the first full read of the collection: the
	// engine does not fire before it, so no fire runs inside a window it
	// did not know of yet.
	synced     chan struct{}
	syncedOnce sync.Once
}

// newBlackoutWatch returns the watch over db's blackouts collection; it
// reads nothing until start.
func newBlackoutWatch(db *mongo.Database, opts Options, log *slog.Logger) *blackoutWatch {
	b := &blackoutWatch{set: blackout.NewSet(opts.Location, log), synced: make(chan struct{})}
	b.watcher = changestream.New(opts.watch(changestream.Options{
		ID:     opts.InstanceID + "/" + blackout.CollectionName,
		Feed:   changestream.NewMongoFeed(db.Collection(blackout.CollectionName), blackoutsMaxAwait),
		Tokens: resumetoken.NewMemoryStore(),
		Sink:   b.set,
		Logger: log.With("collection", blackout.CollectionName),
		Hooks: changestream.Hooks{
			Synced: func() { b.syncedOnce.Do(func() { close(b.synced) }) },
		},
	}))
	return b
}

// match is the fire path's RunnerOptions.Blackout.
func (b *blackoutWatch) match(_ string, category string, slot time.Time) (record.Exclusion, bool) {
	w, ok := b.set.Match(category, slot)
	if !ok {
		return record.Exclusion{}, false
	}
	return record.BlackoutExclusion(w.ID, w.Reason), true
}

// ready reports whether the windows have been read once.
func (b *blackoutWatch) ready() bool {
	select {
	case <-b.synced:
		return true
	default:
		return false
	}
}

// start runs the watcher from when this process joined the members (or
// found the database unreachable, like the schedules watcher) until ctx
// ends; the returned channel is closed when it has stopped.
func (b *blackoutWatch) start(ctx context.Context, joined, away <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-joined:
		case <-away:
		case <-ctx.Done():
			return
		}
		_ = b.watcher.Run(ctx) // errors only for an unknown mode, which config refuses
	}()
	return done
}
