package daemon

import (
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/blackout"
	"github.com/cronswap/cronswap/internal/record"
)

// blackoutWatch keeps the daemon's blackout windows equal to the
// blackouts collection (through its sideWatch) and answers the fire path's
// question whether a fire falls in a window.
type blackoutWatch struct {
	set *blackout.Set
	*sideWatch
}

// newBlackoutWatch returns the watch over db's blackouts collection; it
// reads nothing until start.
func newBlackoutWatch(db *mongo.Database, opts Options, log *slog.Logger) *blackoutWatch {
	set := blackout.NewSet(opts.Location, log)
	return &blackoutWatch{set: set, sideWatch: newSideWatch(db, blackout.CollectionName, set, opts, log)}
}

// match is the fire path's RunnerOptions.Blackout.
func (b *blackoutWatch) match(_ string, category string, slot time.Time) (record.Exclusion, bool) {
	w, ok := b.set.Match(category, slot)
	if !ok {
		return record.Exclusion{}, false
	}
	return record.BlackoutExclusion(w.ID, w.Reason), true
}
