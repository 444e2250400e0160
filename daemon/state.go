package daemon

import (
	"context"
	"iter"
	"log/slog"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/statefile"
	"github.com/cronswap/cronswap/schedule"
)

// stateStore returns the warm-restart state file of opts.StateFile for the
// schedules of db, or nil (a plain nil interface) when it is not set.
// reserve is given the number of schedules a loaded file holds, before
// the first of them is read.
func stateStore(opts Options, db *mongo.Database, reserve func(n int)) changestream.StateStore {
	if opts.StateFile == "" {
		return nil
	}
	return reservingStore{
		StateStore: statefile.New(opts.StateFile, statefile.Options{
			WatcherID: opts.InstanceID,
			Source:    db.Name() + "." + schedule.CollectionName,
		}),
		reserve: reserve,
	}
}

// reservingStore is a state store whose loads make room for the
// schedules they hold in what keeps them (the engine's index and the edit
// history's copy), so that arming a million from the file does not grow
// both step by step as it goes. A file that is then not used (its token is
// not the stored one) is followed by a full reload of about as many.
type reservingStore struct {
	changestream.StateStore
	reserve func(n int)
}

func (s reservingStore) Load(ctx context.Context) (changestream.State, error) {
	st, err := s.StateStore.Load(ctx)
	if err == nil && st.Documents > 0 {
		s.reserve(st.Documents)
	}
	return st, err
}

// reserve makes room for about n schedules in the engine and the edit
// history's copy of the documents, while they hold none (a state file's
// count, or the collection's before a start's full read).
func (s *Service) reserve(n int) {
	s.engine.Reserve(n)
	s.history.recorder.Reserve(n)
}

// reservingFeed is the schedules' feed whose first full read, while the
// engine holds no job (a start without a usable state file), asks the
// server how many documents the collection has (an estimated count: the
// collection's metadata, one command) and makes room for that many before
// the read begins, as a state file's count does. Later full reads, and a
// first one after a warm start, read as the feed does.
type reservingFeed struct {
	changestream.Feed
	coll    *mongo.Collection
	empty   func() bool
	reserve func(n int)
	log     *slog.Logger
	counted atomic.Bool // the count was asked for (once a process)
}

// reserveCountTimeout bounds the count before a start's full read: the
// read is what matters, and begins without the count if it is slow.
const reserveCountTimeout = 5 * time.Second

func (f *reservingFeed) Snapshot(ctx context.Context) iter.Seq2[bson.Raw, error] {
	docs := f.Feed.Snapshot(ctx)
	return func(yield func(bson.Raw, error) bool) {
		if f.empty() && f.counted.CompareAndSwap(false, true) {
			cctx, cancel := context.WithTimeout(ctx, reserveCountTimeout)
			n, err := f.coll.EstimatedDocumentCount(cctx)
			cancel()
			if err != nil {
				f.log.Debug("could not count the schedules before the first full read; reading without room made for them",
					"collection", f.coll.Name(), "error", err)
			} else {
				f.reserve(int(n))
			}
		}
		for d, err := range docs {
			if !yield(d, err) {
				return
			}
		}
	}
}
