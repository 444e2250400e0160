package daemon

import (
	"context"

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
// history's copy of the documents, while they hold none.
func (s *Service) reserve(n int) {
	s.engine.Reserve(n)
	s.history.recorder.Reserve(n)
}
