package daemon

import (
	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/statefile"
	"github.com/cronswap/cronswap/schedule"
)

// stateStore returns the warm-restart state file of config state_file, or
// nil (a plain nil interface) when it is not set.
func stateStore(cfg config.Config) changestream.StateStore {
	if cfg.StateFile == "" {
		return nil
	}
	return statefile.New(cfg.StateFile, statefile.Options{
		WatcherID: cfg.InstanceID,
		Source:    cfg.Mongo.Database + "." + schedule.CollectionName,
	})
}
