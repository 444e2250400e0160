package daemon

import (
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/statefile"
	"github.com/cronswap/cronswap/schedule"
)

// stateStore returns the warm-restart state file of opts.StateFile for the
// schedules of db, or nil (a plain nil interface) when it is not set.
func stateStore(opts Options, db *mongo.Database) changestream.StateStore {
	if opts.StateFile == "" {
		return nil
	}
	return statefile.New(opts.StateFile, statefile.Options{
		WatcherID: opts.InstanceID,
		Source:    db.Name() + "." + schedule.CollectionName,
	})
}
